package jsonstr

import (
	"encoding/json"
	"testing"
)

var samples = []string{"", "plain ascii", `quote " back \ slash`, "<html> & co", "\x00\x1f\x7f", "tab\tnew\nline",
	"é ü 漢字", "\u2028\u2029", "bad \xff\xfe utf8", "\xed\xa0\x80"}

// FuzzAppend: Append writes what json.Marshal writes.
func FuzzAppend(f *testing.F) {
	for _, s := range samples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := Append([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("Append(%q) = %s, json.Marshal %s", s, got[1:], want)
		}
	})
}

// FuzzPlain: a Plain string decodes to its own bytes.
func FuzzPlain(f *testing.F) {
	for _, s := range samples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !Plain([]byte(s)) {
			return
		}
		var got string
		if err := json.Unmarshal([]byte(`"`+s+`"`), &got); err != nil || got != s {
			t.Fatalf("Plain(%q), but it decodes to %q (%v)", s, got, err)
		}
	})
}
