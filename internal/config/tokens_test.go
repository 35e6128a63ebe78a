package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/store"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	got, err := ParseTokens(" acme:0123456789abcdef-1 , acme:0123456789abcdef-2,beta.team:0123456789abcdef-3,")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Token{
		{Tenant: "acme", Hash: sha256.Sum256([]byte("0123456789abcdef-1"))},
		{Tenant: "acme", Hash: sha256.Sum256([]byte("0123456789abcdef-2"))},
		{Tenant: "beta.team", Hash: sha256.Sum256([]byte("0123456789abcdef-3"))},
	}
	if len(got) != len(want) {
		t.Fatalf("tokens = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("token %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got, err := ParseTokens(""); err != nil || len(got) != 0 {
		t.Fatalf("empty = %v, %v", got, err)
	}
	for _, bad := range []string{"notoken", "acme:short", ":0123456789abcdef", "a b:0123456789abcdef", "acme:0123456789abcdef,beta:0123456789abcdef", strings.Repeat("t", 65) + ":0123456789abcdef"} {
		_, err := ParseTokens(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("%q: the error repeats the token: %v", bad, err)
		}
	}
}

func TestParse_Tokens(t *testing.T) {
	t.Parallel()
	h := sha256.Sum256([]byte("0123456789abcdef"))
	hexed := hex.EncodeToString(h[:])
	f, err := parse([]byte("tokens:\n  - tenant: acme\n    sha256: "+strings.ToUpper(hexed)+"\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tokens) != 1 || f.Tokens[0] != (store.Token{Tenant: "acme", Hash: h}) {
		t.Fatalf("tokens = %+v", f.Tokens)
	}
	for src, want := range map[string]string{
		"tokens:\n  - tenant: acme\n    sha256: abc\n":                                                  "line 3: tokens[0].sha256: must be the token's SHA-256",
		"tokens:\n  - sha256: " + hexed + "\n":                                                          "line 2: tokens[0].tenant: the tenant name is empty",
		"tokens:\n  - tenant: a\n    sha256: " + hexed + "\n  - tenant: b\n    sha256: " + hexed + "\n": "line 5: tokens[1].sha256: the same token is listed twice",
		"tokens:\n  - tenant: a\n    token: x\n":                                                        `unknown field "token"`,
	} {
		_, err := parse([]byte(src), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}
