package webhooks

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrRefused: the destination resolved to an address webhooks may not
// reach (loopback, private, link-local or unspecified) without
// Config.AllowPrivate.
var ErrRefused = errors.New("destination address refused")

// newClient returns the HTTP client of deliveries: every connection is
// checked at dial time, after DNS resolution, by refuse (so a name that
// resolves to a private address is caught, also on a redirect of DNS
// between checks); environment proxies are not used (they would dial for
// us); redirects are not followed (a 3xx is a failed delivery); each
// attempt is bounded by timeout.
func newClient(timeout time.Duration, allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: timeout}
	if !allowPrivate {
		dialer.Control = refuse
	}
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

// refuse is a net.Dialer Control: it fails the dial when address (an
// IP:port, after resolution) is loopback, private, link-local, unspecified
// or otherwise not a public unicast address.
func refuse(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q is no IP address", ErrRefused, address)
	}
	ip := ap.Addr().Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || thisNetwork.Contains(ip) {
		return fmt.Errorf("%w: %s is not a public address (set SUBAGENTD_WEBHOOK_ALLOW_PRIVATE=true to allow it)", ErrRefused, ip)
	}
	return nil
}

// thisNetwork is 0.0.0.0/8, which Linux dials as the local host.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
