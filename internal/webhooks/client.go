package webhooks

import (
	"net/http"
	"time"

	"github.com/subagentd/subagentd/internal/netguard"
)

// newClient returns the HTTP client of deliveries: every connection is
// checked at dial time by the outbound guard (internal/netguard) unless
// allowPrivate; environment proxies are not used (they would dial for
// us); redirects are not followed (a 3xx is a failed delivery); each
// attempt is bounded by timeout.
func newClient(timeout time.Duration, allowPrivate bool) *http.Client {
	dialer := netguard.Dialer(timeout, allowPrivate, "SUBAGENTD_WEBHOOK_ALLOW_PRIVATE=true")
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
