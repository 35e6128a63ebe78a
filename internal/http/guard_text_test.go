package http

import (
	"net/http"
	"net/url"
	"testing"
)

// TestCheckText_Query: a query name or value that is not UTF-8 or holds a
// NUL is refused whether it is escaped or raw, and a clean query passes.
func TestCheckText_Query(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rawQuery string
		ok       bool
	}{
		{"", true},
		{"wait=true", true},
		{"q=a+b&after=%E2%98%83", true},
		{"q=☃&x", true},
		{"q=%FF", false},
		{"q=%00", false},
		{"%C3%28=1", false},
		{"q=\xff", false},
		{"q=a\x00b", false},
		{"\xc3(=1", false},
	} {
		r := &http.Request{URL: &url.URL{Path: "/v1/runs", RawQuery: tc.rawQuery}, Host: "localhost", Header: http.Header{}}
		if err := checkText(r); (err == nil) != tc.ok {
			t.Errorf("checkText(?%s) = %v, want ok %v", tc.rawQuery, err, tc.ok)
		}
	}
}
