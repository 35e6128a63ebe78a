package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// secretPrefix starts every signing secret (Standard Webhooks).
const secretPrefix = "whsec_"

// newSecret returns a new signing secret: whsec_ and the base64 of 32
// random bytes.
func newSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return secretPrefix + base64.StdEncoding.EncodeToString(key)
}

// signature returns the webhook-signature header of a delivery: one
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per secret, space
// separated, as Standard Webhooks (standardwebhooks.com) specifies. The
// key is the base64-decoded part of the secret after whsec_.
func signature(secrets []string, id string, ts time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
		if err != nil {
			return "", fmt.Errorf("webhooks: decode a signing secret: %w", err)
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " "), nil
}

// secrets returns the secrets that sign at now: the endpoint's, and the
// one it replaced while the rotation's overlap lasts.
func secrets(w store.Webhook, now time.Time) []string {
	if w.PrevSecret != "" && now.Before(w.PrevSecretUntil) {
		return []string{w.Secret, w.PrevSecret}
	}
	return []string{w.Secret}
}

// newTraceparent returns the W3C traceparent of a new sampled trace: what
// a delivery carries when no trace reaches it (the run it reports kept
// none, or it reports none).
func newTraceparent() string {
	var ids [24]byte
	_, _ = rand.Read(ids[:]) // never fails (crypto/rand)
	return "00-" + hex.EncodeToString(ids[:16]) + "-" + hex.EncodeToString(ids[16:]) + "-01"
}

// newID returns a new id with prefix.
func newID(prefix string) string { return prefix + strings.ToLower(rand.Text()) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
