package pg

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// unreachable reports whether err says the database cannot be reached —
// no connection could be made, the connection broke, or the server is
// shutting down or refusing connections — rather than that a statement
// failed. Such errors are store.ErrUnavailable: the request may be retried.
func unreachable(err error) bool {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr), pgconn.Timeout(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01–57P03: the server is
		// shutting down or cannot take connections yet; 53300: too many
		// connections.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" ||
			pgErr.Code == "57P03" || pgErr.Code == "53300"
	}
	// pgx reports a connection it closed after a failure as "conn closed".
	return pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}
