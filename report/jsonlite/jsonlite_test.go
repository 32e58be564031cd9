package jsonlite

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

type hexAddr uint64

func (h hexAddr) MarshalJSON() ([]byte, error) {
	return []byte(`"0x` + strconv.FormatUint(uint64(h), 16) + `"`), nil
}

type inner struct {
	A    string   `json:"a"`
	B    int      `json:"b,omitempty"`
	Addr hexAddr  `json:"addr"`
	Opt  *hexAddr `json:"opt,omitempty"`
}

type sample struct {
	Name    string           `json:"name"`
	N       int64            `json:"n"`
	U       uint32           `json:"u"`
	OK      bool             `json:"ok,omitempty"`
	List    []inner          `json:"list"`
	Strs    []string         `json:"strs,omitempty"`
	Counts  map[string]int   `json:"counts,omitempty"`
	Times   map[string][]int `json:"times"`
	NoTag   int
	Skipped int `json:"-"`
	private int
}

func samples() []sample {
	h := hexAddr(0xdead)
	return []sample{
		{},
		{Name: "x", N: -1 << 63, U: 1<<32 - 1, OK: true, NoTag: 3, Skipped: 4, private: 5},
		{Name: "<a&b> \"q\" \\ \n\r\t\x00\x1f\x7f é \u2028\u2029 \xff\xfe 😀", List: []inner{{A: "a", Addr: 1}, {B: 2, Opt: &h}}},
		{Strs: []string{}, Counts: map[string]int{"z": 1, "a": 2, "m<": 3}, Times: map[string][]int{"/bin/x": {1, 2}, "": nil}},
		{List: []inner{}, Times: map[string][]int{}},
	}
}

func TestMarshalIsEncodingJSON(t *testing.T) {
	for i, s := range samples() {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Marshal(s)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("sample %d:\n got %s (%v)\nwant %s", i, got, err, want)
		}
		want, _ = json.MarshalIndent(s, "> ", "  ")
		got, err = MarshalIndent(s, "> ", "  ")
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("sample %d indented:\n got %s (%v)\nwant %s", i, got, err, want)
		}
	}
}
