package main

import (
	"fmt"
	"strings"
	"time"
)

// The SRQ cases: an SRQ of the client's whose entries are garbage, and
// two RC QPs on it, A and B, each connected in turn to a fresh QP of the
// server, which SENDs into it. The QP that takes a malformed entry
// completes it with the contract's status and goes to the error state
// (the server's SEND gets the NAK); the SRQ is no worse for it: the
// other QP takes the next entry, and no SRQ_ERR is raised (that is for a
// ring the device can not read).

// srqSetup creates an SRQ of the case's and two RC QPs on it, on the
// case's CQs, not connected yet.
func (e *caseEnv) srqSetup() (s *srq, a, b *qp, err error) {
	if s, err = e.v.createSRQ(e.user(8), e.pd, 8, 2); err != nil {
		return nil, nil, nil, err
	}
	e.srqs = append(e.srqs, s)
	for _, q := range []**qp{&a, &b} {
		if *q, err = e.v.createQPKind(e.user(4+len(e.more)), e.pd, e.scq, e.rcq, qpCaps{maxSendWR: 8, maxSendSGE: 2},
			qpKind{typ: qptRC, srq: s}); err != nil {
			return nil, nil, nil, err
		}
		e.more = append(e.more, *q)
	}
	return s, a, b, nil
}

// srqTake connects q to a fresh server QP and has the server SEND 64
// bytes into it: the receive completion (id the wr_id it should have)
// and the server's.
func (e *caseEnv) srqTake(q *qp, id uint64) (string, error) {
	if err := e.connectPeer(q); err != nil {
		return "", err
	}
	return e.peerSend(64, 1, id)
}

// srqErr describes the SRQ's SRQ_ERR event, if the device raised one.
func (e *caseEnv) srqErr(s *srq) string {
	if _, err := e.v.waitEvent(500*time.Millisecond, func(ev asyncEv) bool {
		return ev.typ == eventSRQErr && ev.element == s.user
	}); err != nil {
		return "no SRQ_ERR"
	}
	return "SRQ_ERR event"
}

// srqRest describes completions on the receive CQ beyond those a case
// waited for.
func (e *caseEnv) srqRest() string {
	var rest []cqe
	for {
		c, ok := e.rcq.q.poll()
		if !ok {
			break
		}
		rest = append(rest, c)
	}
	if len(rest) == 0 {
		return ""
	}
	return "; then recv " + describe(rest, len(rest), nil)
}

// rxeSRQGarbage is what rdma_rxe (6.1.192) does with a malformed entry at
// its SRQ's head: get_srq_wqe refuses it (logging "invalid num_sge in SRQ
// entry") but leaves it there, so neither QP completes anything and every
// SEND into either gets REM_OP_ERR.
const rxeSRQGarbage = "recv nothing on A or B: the entry stays at the SRQ's head; both SENDs get REM_OP_ERR"

var srqCases = []hostileCase{
	{name: "srq-garbage-entry", want: "A recv LOC_QP_OP_ERR; peer SENT REM_OP_ERR; B recv SUCCESS, bytes right; peer SENT SUCCESS; no SRQ_ERR",
		rxe: rxeSRQGarbage, run: func(e *caseEnv) (string, error) {
			// The SRQ's first entry is garbage (every byte 0xa5: an
			// SGE count past any), its second well-formed.
			s, a, b, err := e.srqSetup()
			if err != nil {
				return "", err
			}
			s.q.post(func(slot []byte) {
				for i := range slot {
					slot[i] = 0xa5
				}
			}, recvWQE{id: 2, sgl: []sge{e.lsge(scratch, recvSize)}}.sum().put)
			ra, err := e.srqTake(a, garbageID)
			if err != nil {
				return "", err
			}
			rb, err := e.srqTake(b, 2)
			if err != nil {
				return "", err
			}
			got := e.buf[mrOff+scratch : mrOff+scratch+64]
			if i := firstNot(got, 0, func(i int) byte { return pattern(5, i) }); i >= 0 {
				rb = strings.Replace(rb, ";", fmt.Sprintf(", byte %d wrong;", i), 1)
			} else {
				rb = strings.Replace(rb, ";", ", bytes right;", 1)
			}
			ev := e.srqErr(s)
			return "A " + ra + "; B " + rb + e.srqRest() + "; " + ev, nil
		}},
	{name: "srq-producer-over-garbage", want: "A recv LOC_QP_OP_ERR; peer SENT REM_OP_ERR; B recv LOC_QP_OP_ERR; peer SENT REM_OP_ERR; no SRQ_ERR",
		rxe: rxeSRQGarbage, run: func(e *caseEnv) (string, error) {
			// Every slot garbage and producer_index 0xffffffff: the
			// masked index posts all but one slot; each QP that takes
			// one fails, and the ring itself is sound.
			s, a, b, err := e.srqSetup()
			if err != nil {
				return "", err
			}
			garbage(s.q, 0xa5)
			s.q.storeProducer(0xffff_ffff)
			ra, err := e.srqTake(a, garbageID)
			if err != nil {
				return "", err
			}
			rb, err := e.srqTake(b, garbageID)
			if err != nil {
				return "", err
			}
			ev := e.srqErr(s)
			return "A " + ra + "; B " + rb + e.srqRest() + "; " + ev, nil
		}},
}
