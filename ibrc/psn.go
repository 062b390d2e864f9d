package ibrc

// PSNs are 24-bit sequence numbers that wrap.
const psnMask = 1<<24 - 1

// psnAdd returns a+n modulo 2^24.
func psnAdd(a uint32, n int) uint32 { return uint32(int64(a)+int64(n)) & psnMask }

// psnDiff returns a-b as a signed distance in [-2^23, 2^23).
func psnDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }
