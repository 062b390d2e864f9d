#!/usr/bin/env bash
# Runs the kernel's checkpatch.pl (from Debian's linux-source-6.1, the guest
# kernel's own tree, cached) over the guest driver: it must stay clean.
set -euo pipefail
cache="${NPFNIC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/npfnic}/checkpatch"
script="$cache/linux-source-6.1/scripts/checkpatch.pl"
if [ ! -f "$script" ]; then
	echo "checkpatch: fetching linux-source-6.1 from Debian (about 140 MB, once)"
	mkdir -p "$cache" && cd "$cache"
	apt-get -o APT::Sandbox::User=root download linux-source-6.1 >/dev/null || { apt-get update >/dev/null && apt-get -o APT::Sandbox::User=root download linux-source-6.1 >/dev/null; }
	dpkg-deb --fsys-tarfile linux-source-6.1_*.deb | tar -x --wildcards './usr/src/linux-source-6.1.tar.xz'
	tar -xJf usr/src/linux-source-6.1.tar.xz --wildcards 'linux-source-6.1/scripts/checkpatch.pl' \
		'linux-source-6.1/scripts/spelling.txt' 'linux-source-6.1/scripts/const_structs.checkpatch'
	rm -rf usr linux-source-6.1_*.deb
	cd - >/dev/null
fi
cd "$(dirname "$0")/../guestdrv"
# The generated hardware header follows the generator's layout, not hand style.
perl "$script" --no-tree --strict --quiet -f $(ls *.c *.h | grep -v '^npfnic_hw.h$') Kbuild
echo "checkpatch: guestdrv is clean"
