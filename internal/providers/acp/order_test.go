package acp

import (
	"context"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"testing/synctest"
)

// The agent's output as the SDK reads it: two session updates, another
// notification, a permission request, a response and a third update, read
// a few bytes at a time so that lines end mid-read.
const orderedOutput = `{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"tool_call"}}}
{"jsonrpc":"2.0","method":"session/update","params":{}}
{"jsonrpc":"2.0","method":"$/other","params":{}}
not json
{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"toolCall":{}}}
{"jsonrpc":"2.0","id":1,"result":{}}
{"jsonrpc":"2.0","method":"session/update","params":{}}
`

func TestOrder_ReadCountsUpdatesBeforeThePermissionRequest(t *testing.T) {
	o := newOrder(iotest.OneByteReader(strings.NewReader(orderedOutput)))
	got, err := io.ReadAll(o)
	if err != nil || string(got) != orderedOutput {
		t.Fatalf("read %q, %v: want the output unchanged", got, err)
	}
	if o.read != 3 || o.before != 2 {
		t.Fatalf("read %d updates, %d before the permission request; want 3 and 2", o.read, o.before)
	}
}

// A permission request waits until the updates before it are handled,
// and no longer; a closed connection (its context) ends the wait.
func TestOrder_PermissionWaitsForTheUpdatesBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newOrder(strings.NewReader(orderedOutput))
		if _, err := io.ReadAll(o); err != nil {
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() {
			o.wait(t.Context())
			close(waited)
		}()
		o.handled()
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("the permission request went ahead with 1 of the 2 updates before it handled")
		default:
		}
		o.handled()
		synctest.Wait()
		select {
		case <-waited:
		default:
			t.Fatal("the permission request still waits with both updates before it handled")
		}

		ctx, cancel := context.WithCancel(t.Context())
		o.before = 10 // an update the client never gets
		closed := make(chan struct{})
		go func() {
			o.wait(ctx)
			close(closed)
		}()
		synctest.Wait()
		cancel()
		<-closed
	})
}
