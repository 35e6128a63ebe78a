package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/subagentd/subagentd/internal/store"
)

// MinTokenLength is the shortest token SUBAGENTD_TOKENS accepts: shorter
// ones can be guessed.
const MinTokenLength = 16

// maxTenantLen bounds tenant names, which appear in logs and rows.
const maxTenantLen = 64

var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// checkTenant returns why name cannot be a tenant name, or "".
func checkTenant(name string) string {
	switch {
	case name == "":
		return "the tenant name is empty"
	case len(name) > maxTenantLen:
		return fmt.Sprintf("tenant %q is longer than %d characters", name, maxTenantLen)
	case !tenantPattern.MatchString(name):
		return fmt.Sprintf("tenant %q must match %s", name, tenantPattern)
	}
	return ""
}

// ParseTokens reads SUBAGENTD_TOKENS: comma-separated tenant:token pairs.
// A tenant may have several tokens; a token may serve only one tenant. The
// errors never repeat a token, and name the entry, not the variable: the
// caller says where the list came from (a flag or the variable).
func ParseTokens(s string) ([]store.Token, error) {
	var out []store.Token
	seen := map[[sha256.Size]byte]bool{}
	for i, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		tenant, token, ok := strings.Cut(pair, ":")
		if !ok {
			return nil, fmt.Errorf("entry %d is not tenant:token", i+1)
		}
		if msg := checkTenant(tenant); msg != "" {
			return nil, fmt.Errorf("entry %d: %s", i+1, msg)
		}
		if len(token) < MinTokenLength {
			return nil, fmt.Errorf("entry %d (tenant %q): the token is shorter than %d characters", i+1, tenant, MinTokenLength)
		}
		h := sha256.Sum256([]byte(token))
		if seen[h] {
			return nil, fmt.Errorf("entry %d (tenant %q): the token is listed twice", i+1, tenant)
		}
		seen[h] = true
		out = append(out, store.Token{Tenant: tenant, Hash: h})
	}
	return out, nil
}

// parseHash reads a hex SHA-256.
func parseHash(s string) ([sha256.Size]byte, bool) {
	var h [sha256.Size]byte
	b, err := hex.DecodeString(strings.ToLower(strings.TrimSpace(s)))
	if err != nil || len(b) != sha256.Size {
		return h, false
	}
	copy(h[:], b)
	return h, true
}
