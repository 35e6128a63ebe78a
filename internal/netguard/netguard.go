// Package netguard is the one home of the outbound SSRF guard: the
// destinations of webhook deliveries and of A2A providers are user-given
// URLs, and both refuse loopback, private and link-local addresses unless
// the deployment allows them (docs/architecture.md §10).
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// ErrRefused: the destination resolved to an address the guard may not
// reach (loopback, private, link-local or unspecified).
var ErrRefused = errors.New("destination address refused")

// Dialer returns a dialer bounded by timeout that, unless allowPrivate,
// checks every connection at dial time, after DNS resolution (so a name
// that resolves to a private address is caught, also when DNS changes
// between checks). allowSetting names what allows private addresses, for
// the error.
func Dialer(timeout time.Duration, allowPrivate bool, allowSetting string) *net.Dialer {
	d := &net.Dialer{Timeout: timeout}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error { return Check(address, allowSetting) }
	}
	return d
}

// Check fails when address (an IP:port, after resolution) is loopback,
// private, link-local, unspecified or otherwise not a public unicast
// address; the error matches ErrRefused and names allowSetting.
func Check(address, allowSetting string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q is no IP address", ErrRefused, address)
	}
	ip := ap.Addr().Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || thisNetwork.Contains(ip) {
		return fmt.Errorf("%w: %s is not a public address (set %s to allow it)", ErrRefused, ip, allowSetting)
	}
	return nil
}

// thisNetwork is 0.0.0.0/8, which Linux dials as the local host.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
