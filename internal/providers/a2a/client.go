package a2a

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/subagentd/subagentd/internal/netguard"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// allowSetting is what lets A2A providers reach private addresses.
const allowSetting = "SUBAGENTD_A2A_ALLOW_PRIVATE=true"

// dialTimeout bounds connecting and each response's headers; a stream's
// body is unbounded (a remote task may work for hours).
const dialTimeout = 30 * time.Second

// newHTTPClient returns the client of every call to the remote agent, the
// card fetch included: each connection is checked by the outbound guard
// (internal/netguard) unless allowPrivate, environment proxies are not
// used (they would dial for us), redirects are not followed (the card's
// and the calls' URLs are the ones checked), and every request carries
// the bearer token, when there is one, and the traceparent of its context.
func newHTTPClient(allowPrivate bool, token string) *http.Client {
	dialer := netguard.Dialer(dialTimeout, allowPrivate, allowSetting)
	return &http.Client{
		Transport: &headers{token: token, next: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   dialTimeout,
			ResponseHeaderTimeout: dialTimeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// headers adds the provider's headers to every request.
type headers struct {
	token string
	next  http.RoundTripper
}

func (h *headers) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	if tp := telemetry.Traceparent(req.Context()); tp != "" {
		req.Header.Set("traceparent", tp)
	}
	return h.next.RoundTrip(req)
}

// checkURL refuses, unless allowPrivate, a card URL whose host is a
// loopback, private or link-local address or a localhost name: a clear
// error at start-up rather than a refused dial at the first run. Names
// that resolve to such addresses are refused at dial time.
func checkURL(raw string, allowPrivate bool) error {
	if allowPrivate {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("card URL %q: %w", raw, err)
	}
	host := strings.ToLower(u.Hostname())
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return fmt.Errorf("card URL %q: %w: %s is the local host (set %s to allow it)", raw, netguard.ErrRefused, host, allowSetting)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := netguard.Check(net.JoinHostPort(ip.String(), "0"), allowSetting); err != nil {
			return fmt.Errorf("card URL %q: %w", raw, err)
		}
	}
	return nil
}
