package jsonlite

import (
	"bytes"
	"encoding/json"
	"reflect"
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

type state struct {
	Global  []int64            `json:"global"`
	PerExe  map[string][]int64 `json:"per_exe"`
	Dropped map[string]int     `json:"dropped"`
	Name    string             `json:"name"`
	Flag    bool               `json:"flag"`
	Ptr     *uint16            `json:"ptr"`
}

func TestUnmarshalIsEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{}`,
		` {"global":[1,-2,3],"per_exe":{"/a":[4],"/b":[]},"dropped":{"rate_limit":2},"name":"x\u00e9\n\"\\\/","flag":true,"ptr":7} `,
		`{"GLOBAL":[5],"unknown":{"deep":[1,{"x":null}],"s":"t"},"flag":false,"ptr":null}`,
		`{"name":"\ud83d\ude00 \ud800 x","global":null}`,
	} {
		var want, got state
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(in, err)
		}
		if err := Unmarshal([]byte(in), &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v (%v)\nwant %+v", in, got, err, want)
		}
	}
	for _, in := range []string{``, `{`, `{"global":[1,]}`, `{"global":[1.5]}`, `{"ptr":70000}`, `{"name":1}`, `{"flag":"x"}`, `{} x`, `[`, `{"a" 1}`, `"\x01"`, `{"global":[01]}`} {
		var got state
		if err := Unmarshal([]byte(in), &got); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// FuzzUnmarshal: hostile input never panics, and whatever jsonlite accepts,
// encoding/json accepts with the same result.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"global":[1,2],"per_exe":{"/x":[3]},"dropped":{"queue_full":1}}`))
	f.Add([]byte(`{"name":"\ud83d\ude00","ptr":1,"flag":true}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got state
		if Unmarshal(b, &got) != nil {
			return
		}
		var want state
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("%q accepted, encoding/json refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
	})
}
