package trace

import "testing"

func TestTimelines(t *testing.T) {
	ev := func(ts int64, k Kind, tr Track, a, b uint64) Event {
		return Event{TS: ts, Kind: k, Track: tr, A: a, B: b}
	}
	const vec = 5
	for _, tc := range []struct {
		name   string
		events []Event
		want   []Timeline // compared by the stages' timestamps
	}{
		{
			name: "rx drop: the frame lands in the descriptor after the response",
			events: []Event{
				ev(1, Fault, PairRx(0), 0x1010, 7),
				ev(2, PageRequest, TrackPRI, 3, 0x1000),
				ev(3, IRQ, TrackIRQ, 1, 0), // another vector
				ev(4, IRQ, TrackIRQ, vec, 0),
				ev(5, RxFrame, PairRx(0), 7, 60), // before the response: not the resume
				ev(6, PageResponse, TrackPRI, 3, 0),
				ev(7, RxFrame, PairRx(1), 7, 60), // another queue
				ev(8, RxFrame, PairRx(0), 7, 60),
			},
			want: []Timeline{{Fault: Event{TS: 1}, Request: Event{TS: 2}, IRQ: Event{TS: 4}, Response: Event{TS: 6}, Resume: Event{TS: 8}}},
		},
		{
			name: "rx backup: the resolve of the frame's bitmap index, even before the response",
			events: []Event{
				ev(1, Fault, PairRx(0), 0x2000, 9),
				ev(2, PageRequest, TrackPRI, 0, 0x2000),
				ev(3, BackupStore, TrackBackup, 9, 4),
				ev(4, IRQ, TrackIRQ, vec, 0),
				ev(5, BackupResolve, TrackBackup, 3, 9),
				ev(6, BackupResolve, TrackBackup, 4, 10),
				ev(7, PageResponse, TrackPRI, 0, 0),
			},
			want: []Timeline{{Fault: Event{TS: 1}, Request: Event{TS: 2}, IRQ: Event{TS: 4}, Response: Event{TS: 7}, Resume: Event{TS: 6}}},
		},
		{
			name: "tx: the queue's next frame",
			events: []Event{
				ev(1, Fault, PairTx(2), 0x3000, 1),
				ev(2, PageRequest, TrackPRI, 1, 0x3000),
				ev(3, IRQ, TrackIRQ, vec, 0),
				ev(4, PageResponse, TrackPRI, 1, 0),
				ev(5, TxFrame, PairTx(2), 1, 60),
			},
			want: []Timeline{{Fault: Event{TS: 1}, Request: Event{TS: 2}, IRQ: Event{TS: 3}, Response: Event{TS: 4}, Resume: Event{TS: 5}}},
		},
		{
			name: "a request whose fault the ring lost is left out; a second fault on a page pairs with the next request",
			events: []Event{
				ev(1, PageRequest, TrackPRI, 1, 0x4000),
				ev(2, Fault, PairRx(0), 0x4000, 1),
				ev(3, Fault, PairRx(0), 0x4000, 1),
				ev(4, PageRequest, TrackPRI, 2, 0x4000),
			},
			want: []Timeline{{Fault: Event{TS: 3}, Request: Event{TS: 4}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Timelines(tc.events, vec)
			if len(got) != len(tc.want) {
				t.Fatalf("%d timelines, want %d: %+v", len(got), len(tc.want), got)
			}
			for i := range got {
				g, w := got[i].Stages(), tc.want[i].Stages()
				for s := range g {
					if g[s].TS != w[s].TS {
						t.Errorf("timeline %d, %s at %d, want %d", i, StageNames[s], g[s].TS, w[s].TS)
					}
				}
				if got[i].Complete() != (w[4].TS != 0) {
					t.Errorf("timeline %d: Complete %v", i, got[i].Complete())
				}
			}
		})
	}
}
