//go:build linux

package http

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// stalledClient is a raw TCP client of an SSE stream that reads the
// response head and then nothing: once the socket buffers are full, the
// server's writes to it block.
type stalledClient struct {
	conn *net.TCPConn
	resp *http.Response
}

// Socket options of the stalled client, set before it connects. On
// loopback the server's send buffer starts at about twenty segments of the
// peer's MSS (64 KiB by default: some MiB in all, which would take many
// large runs to fill); a 1 KiB MSS and a 4 KiB receive buffer bring the
// buffers between the server and the stalled client to some 100 KiB.
// Shrinking the receive buffer only after connecting would not do: the
// window it leaves is below one segment and never reopens promptly, so the
// client could not drain the stream afterwards.
const (
	stalledRcvBuf = 4 << 10
	stalledMSS    = 1 << 10
)

// dialStalled sends GET path over a raw connection with small socket
// buffers, validating the request and the response head against the spec.
func (b *testBundle) dialStalled(t *testing.T, path string) *stalledClient {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = errors.Join(
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, stalledRcvBuf),
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, stalledMSS))
		})
		return errors.Join(err, serr)
	}}
	conn, err := d.DialContext(t.Context(), "tcp", b.ts.Listener.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	req := b.request(t, call{method: http.MethodGet, path: path})
	in := validateRequest(t, req.Clone(req.Context()), nil, false)
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: "+req.Host+"\r\nAccept: text/event-stream\r\n\r\n"); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("read response head: %v", err)
	}
	validateResponse(t, in, req, resp.StatusCode, resp.Header, nil, true)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &stalledClient{conn: conn.(*net.TCPConn), resp: resp}
}

// drain reads what the server delivered until it closed the connection,
// and returns the complete event frames, each checked against the spec; a
// frame cut off by the close is dropped. It fails if the connection stays
// open.
func (c *stalledClient) drain(t *testing.T, path string) []frame {
	t.Helper()
	if err := c.conn.SetReadDeadline(time.Now().Add(streamTimeout)); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(c.resp.Body)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("the server did not close the stalled connection: %v", err)
	}
	_, router := spec(t)
	probe, _ := http.NewRequest(http.MethodGet, path, nil)
	route, _, err := router.FindRoute(probe)
	if err != nil {
		t.Fatal(err)
	}
	schemas := sseSchemas(t, route)
	chunks := strings.Split(string(body), "\n\n")
	var frames []frame
	for _, chunk := range chunks[:len(chunks)-1] { // the last one is cut off, or empty
		var f frame
		for line := range strings.SplitSeq(chunk, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				f.comment = line[1:]
			case strings.HasPrefix(line, "id: "):
				f.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				f.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				f.data = []byte(line[6:])
			default:
				t.Fatalf("unexpected SSE line %q", line)
			}
		}
		if f.comment != "" || (f.event == "" && f.data == nil) {
			continue // a heartbeat, or the live stream's id-only anchor
		}
		if err := checkFrame(f, schemas); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	return frames
}

// awaitLifecycleCount waits, on the store's wake-ups, until the lifecycle
// log holds n events after id (runs record their subagent/end
// asynchronously).
func (b *testBundle) awaitLifecycleCount(t *testing.T, after int64, n int) {
	t.Helper()
	wake, stop := b.st.Subscribe(store.LifecycleTopic)
	defer stop()
	deadline := time.After(streamTimeout)
	for len(b.lifecycleAfter(t, after)) < n {
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("fewer than %d lifecycle events after %d within %s", n, after, streamTimeout)
		}
	}
}

// recorder is a slog handler that passes records on and sends a copy of
// each to a channel (dropping them when it is full), so that a test can
// wait for one. Loggers derived with With or WithGroup do not record.
type recorder struct {
	slog.Handler
	records chan slog.Record
}

func (h recorder) Handle(ctx context.Context, r slog.Record) error {
	select {
	case h.records <- r.Clone():
	default:
	}
	return h.Handler.Handle(ctx, r)
}

// awaitRecord waits for a record at level with one of msgs.
func awaitRecord(t *testing.T, records <-chan slog.Record, level slog.Level, msgs ...string) {
	t.Helper()
	deadline := time.After(streamTimeout)
	for {
		select {
		case r := <-records:
			if r.Level == level && slices.Contains(msgs, r.Message) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s log %q within %s", level, msgs, streamTimeout)
		}
	}
}

// TestEvents_StalledSubscriberIsCutOff: a subscriber that stops reading
// slows neither the producers nor the other subscribers. While the server
// is blocked writing to it, every POST /v1/runs answers at once and the
// other subscribers receive every event in order; the server then closes
// the stalled connection (its write deadline passed) and logs that it cut
// off a slow subscriber, and the subscriber
// resumes with Last-Event-ID and receives everything it missed exactly
// once, partly from the store (the ring is smaller than what it missed).
func TestEvents_StalledSubscriberIsCutOff(t *testing.T) {
	// A POST blocked behind the stalled write would take the whole
	// writeTimeout; the bound on POSTs is half of it, generous for a
	// loaded machine. The cut-off comes within streamTimeout of the
	// POSTs (at most writeTimeout after the blocked write began).
	const writeTimeout = 8 * time.Second
	records := make(chan slog.Record, 256)
	b := setup(t, func(c *Config) {
		c.WriteTimeout, c.RingSize = writeTimeout, 16
		c.Logger = slog.New(recorder{c.Logger.Handler(), records})
	})
	// A remote provider: its runs carry their output in subagent/end only,
	// with no child log to write.
	p := b.register(t, &fakeProvider{name: "remote"})
	parent := b.rootSession(t)

	from := b.lastID(t)
	stalled := b.dialStalled(t, "/v1/events")
	readers := []*sseStream{b.stream(t, "/v1/events", nil), b.stream(t, "/v1/events", nil)}
	if n := b.sseClients(t, "events"); n != 3 {
		t.Fatalf("%v event streams connected, want 3", n)
	}

	// 64 KiB per subagent/end: the first few runs fill the buffers, the
	// rest are created while the server's write to the stalled client is
	// blocked.
	const runs = 24
	var slowest time.Duration
	for i := range runs {
		began := time.Now()
		b.startRun(t, "remote", parent, nil)
		slowest = max(slowest, time.Since(began))
		(<-p.started).complete(t, strings.Repeat(string(rune('a'+i%26)), 64<<10))
	}
	if slowest > writeTimeout/2 {
		t.Fatalf("the slowest POST /v1/runs took %s while a subscriber stalled", slowest)
	}

	b.awaitLifecycleCount(t, from, 2*runs)
	log := b.lifecycleAfter(t, from)
	for i, r := range readers {
		wantLog(t, "reader "+strconv.Itoa(i), r.nextN(t, len(log)), log)
	}

	// The server cuts the stalled subscriber off either when a write to it
	// outlasts the write deadline or, once a bounded write got through,
	// when it finds it fell behind the ring; both are logged.
	eventually(t, "the server to close the stalled stream", func() bool { return b.sseClients(t, "events") == 2 })
	awaitRecord(t, records, slog.LevelInfo, "stream subscriber too slow; disconnected", "stream subscriber fell behind; disconnected")
	got := stalled.drain(t, "/v1/events")
	t.Logf("the stalled client received %d of %d events before the server closed it", len(got), len(log))
	if len(got) >= len(log)-16 {
		t.Fatalf("the stalled client received %d of %d events: it never fell behind the ring", len(got), len(log))
	}
	resume := strconv.FormatInt(from, 10)
	if len(got) > 0 {
		resume = got[len(got)-1].id
	}
	resumed := b.stream(t, "/v1/events", map[string]string{"Last-Event-ID": resume})
	got = append(got, resumed.nextN(t, len(log)-len(got))...)
	wantLog(t, "stalled then resumed", got, log)

	live := b.startRun(t, "remote", parent, nil)
	if f := resumed.next(t); f.event != subagent.EventStart || f.lifecycle(t).RunID != live.RunID {
		t.Fatalf("live frame %+v", f)
	}
	(<-p.started).complete(t, "live")
	if f := resumed.next(t); f.event != subagent.EventEnd || f.lifecycle(t).RunID != live.RunID {
		t.Fatalf("live frame %+v", f)
	}
}
