package statestore

import (
	"slices"
	"testing"
)

func TestProducersKey(t *testing.T) {
	if got := ProducersKey("orders", 3); got != "producers/orders/3" {
		t.Fatalf("ProducersKey = %q", got)
	}
}

func TestProducerSetRoundTrip(t *testing.T) {
	var s ProducerSet
	if !s.Add(42, 7, 42, -1, 1<<40) {
		t.Fatal("Add to an empty set did not change it")
	}
	if s.Add(7, 42, -5) {
		t.Fatal("Add of ids already there (and a negative one) changed the set")
	}
	b := s.Encode()
	if want := `{"version":1,"producer_ids":[7,42,1099511627776]}`; string(b) != want {
		t.Fatalf("Encode = %s, want %s", b, want)
	}
	got, err := DecodeProducerSet(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 1 || !slices.Equal(got.IDs, []int64{7, 42, 1 << 40}) {
		t.Fatalf("decoded %+v", got)
	}
	for id, want := range map[int64]bool{7: true, 42: true, 1 << 40: true, 0: false, 8: false, -1: false} {
		if got.Has(id) != want {
			t.Errorf("Has(%d) = %v, want %v", id, !want, want)
		}
	}
}

func TestProducerSetDecode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    []int64
		version int
		err     bool
	}{
		// A state topic written before the records existed has none.
		{name: "no record", in: "", want: nil},
		{name: "no ids", in: `{"version":1}`, want: nil, version: 1},
		{name: "empty", in: `{"version":1,"producer_ids":[]}`, want: nil, version: 1},
		// Written by hand or by a writer that did not sort: read sorted,
		// without duplicates.
		{name: "unsorted", in: `{"version":1,"producer_ids":[9,3,9,5]}`, want: []int64{3, 5, 9}, version: 1},
		// A later version's fields are ignored, its ids kept, and its
		// version kept when written back.
		{name: "later version", in: `{"version":2,"producer_ids":[4],"roles":{"4":"fill"}}`, want: []int64{4}, version: 2},
		{name: "garbage", in: `{"producer_ids":"x"}`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in []byte
			if tc.in != "" {
				in = []byte(tc.in)
			}
			s, err := DecodeProducerSet(in)
			if tc.err {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", s)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.IDs, tc.want) || s.Version != tc.version {
				t.Fatalf("decoded %+v, want ids %v version %d", s, tc.want, tc.version)
			}
			again, err := DecodeProducerSet(s.Encode())
			if err != nil || !slices.Equal(again.IDs, tc.want) || again.Version != max(tc.version, ProducerSetVersion) {
				t.Fatalf("written back and read again: %+v, %v", again, err)
			}
		})
	}
}
