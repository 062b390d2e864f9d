package ibrc

import (
	"reflect"
	"sync/atomic"
	"testing"
)

// TestStatsCounters: the atomic counters are Stats field for field, and
// snapshot copies each into its own field.
func TestStatsCounters(t *testing.T) {
	var c counters
	ct, st := reflect.TypeFor[counters](), reflect.TypeFor[Stats]()
	if ct.NumField() != st.NumField() {
		t.Fatalf("counters has %d fields, Stats %d", ct.NumField(), st.NumField())
	}
	cv := reflect.ValueOf(&c).Elem()
	for i := range ct.NumField() {
		if ct.Field(i).Name != st.Field(i).Name {
			t.Fatalf("field %d: counters.%s, Stats.%s", i, ct.Field(i).Name, st.Field(i).Name)
		}
		cv.Field(i).Addr().Interface().(*atomic.Uint64).Add(uint64(i + 1))
	}
	sv := reflect.ValueOf(c.snapshot())
	for i := range st.NumField() {
		if got := sv.Field(i).Uint(); got != uint64(i+1) {
			t.Errorf("Stats.%s = %d, want %d", st.Field(i).Name, got, i+1)
		}
	}
}
