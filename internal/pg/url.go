package pg

import (
	"net"
	"net/url"
	"os"
	"strings"
)

// ConnString returns databaseURL with sslmode=disable added when it names
// no sslmode (and PGSSLMODE is unset) and every host it names is a loopback
// address, "localhost" or a Unix socket directory. Encrypting a connection
// that never leaves the machine protects nothing, and under libpq's default
// sslmode=prefer TLS cost 42–45 % of the service's CPU on a loopback
// database, measured with bench/. Any other URL is returned unchanged, so a remote
// host keeps TLS (prefer, or what the URL says), and a keyword/value DSN is
// never rewritten.
func ConnString(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return databaseURL
	}
	q := u.Query()
	if q.Has("sslmode") || os.Getenv("PGSSLMODE") != "" {
		return databaseURL
	}
	hosts := strings.Split(u.Hostname(), ",")
	if h := q.Get("host"); h != "" {
		hosts = strings.Split(h, ",") // the host parameter wins over the authority
	} else if strings.Contains(u.Host, ",") {
		hosts = hosts[:0]
		for _, hp := range strings.Split(u.Host, ",") {
			h, _, err := net.SplitHostPort(hp)
			if err != nil {
				h = hp
			}
			hosts = append(hosts, h)
		}
	}
	for _, h := range hosts {
		if !localHost(h) {
			return databaseURL
		}
	}
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// localHost reports whether a connection to host stays on this machine.
// An empty host is pgx's default, a Unix socket or localhost.
func localHost(host string) bool {
	host = strings.Trim(host, "[]")
	if host == "" || host == "localhost" || strings.HasPrefix(host, "/") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
