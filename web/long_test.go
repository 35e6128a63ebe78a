package web_test

import (
	"fmt"
	"testing"
	"time"
)

// seedLongLog seeds a continuable child whose log holds 300 turns (2,101
// events with its descriptor) over two activations: the first failed after
// turn 2, the second ran turns 3 to 300. It returns the child's id.
func seedLongLog(t *testing.T, srv *testServer) string {
	t.Helper()
	sd := srv.seeder(t)
	t0 := time.Now().Add(-time.Hour)
	root := sd.root("long talk", t0)
	child := sd.child(root, "spawn", "continuable", "talker", t0)
	var early, late []event
	for n := 1; n <= 300; n++ {
		tr := turn(n, fmt.Sprintf("question %d", n), fmt.Sprintf("answer %d", n), 10, 5)
		if n <= 2 {
			early = append(early, tr...)
		} else {
			late = append(late, tr...)
		}
	}
	sd.events(child, t0.Add(time.Second), early...)
	sd.events(child, t0.Add(2*time.Second), late...)
	sd.run(seedRun{child: child, parent: root, provider: "spawn", taskID: newID("task"),
		start: t0.Add(900 * time.Millisecond), end: t0.Add(1500 * time.Millisecond), stop: "error"})
	sd.run(seedRun{child: child, parent: root, provider: "spawn", taskID: newID("task"),
		start: t0.Add(1900 * time.Millisecond), end: t0.Add(10 * time.Second), stop: "completed"})
	return child
}

// TestDashboard_LongTranscriptDrawsEarlierTurnsAsTheReaderScrolls opens a
// log of 300 turns: the transcript draws its end only, and scrolling up
// draws the turns above without moving what the reader sees, in order,
// with the first activation's failure marked after its last turn. The event
// log lists the newest 500 events once its tab is shown.
func TestDashboard_LongTranscriptDrawsEarlierTurnsAsTheReaderScrolls(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	child := seedLongLog(t, srv)
	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+child)
	b.waitFor("the transcript shows its last answer and counts every event", assistantSays("answer 300", "final")+
		` && document.querySelector('#log-count').textContent === '(2101)'`)
	drawn := eval[int](b, "counting the questions drawn", `document.querySelectorAll('[data-testid="msg-user"]').length`)
	if drawn >= 300 {
		t.Fatalf("%d of 300 questions drawn on opening: the whole log was drawn", drawn)
	}
	b.waitFor("the rows above are offered", `document.querySelector('[data-testid="conv-earlier"]')?.textContent.includes('earlier event')`)

	// The first drawn question stays where the reader sees it while the
	// turns above it are drawn.
	moved := eval[float64](b, "scrolling to the top once", `(async () => {
		const sc = document.getElementById('pane-conv');
		const first = document.querySelector('[data-testid="msg-user"]');
		sc.scrollTop = 0;
		await new Promise((r) => setTimeout(r, 50));
		const was = first.getBoundingClientRect().top - sc.getBoundingClientRect().top;
		for (let i = 0; i < 100 && document.querySelector('[data-testid="msg-user"]') === first; i++) await new Promise((r) => setTimeout(r, 20));
		return first.getBoundingClientRect().top - sc.getBoundingClientRect().top - was;
	})()`)
	if moved < -5 || moved > 5 {
		t.Errorf("the question at the top moved %.0f px when the turns above it were drawn", moved)
	}
	if !eval[bool](b, "scrolling up until every turn is drawn", `(async () => {
		const sc = document.getElementById('pane-conv');
		for (let i = 0; i < 100 && document.querySelector('[data-testid="conv-earlier"]'); i++) {
			sc.scrollTop = 0;
			await new Promise((r) => setTimeout(r, 20));
		}
		const qs = [...document.querySelectorAll('[data-testid="msg-user"]')].map((m) => m.querySelector('.body').textContent);
		return qs.length === 300 && qs.every((q, i) => q === 'question ' + (i + 1));
	})()`) {
		t.Fatal("scrolled to the top, the conversation does not show the 300 questions in order")
	}
	b.waitFor("the first activation's failure is marked after turn 2, before turn 3", `(() => {
		const end = document.querySelector('[data-testid="run-end"]');
		return end && end.textContent.includes('Activation ended: error') && document.querySelectorAll('[data-testid="run-end"]').length === 1 &&
			end.previousElementSibling?.dataset.testid === 'turn-end' && end.previousElementSibling.textContent.includes('Turn 2') &&
			end.nextElementSibling?.querySelector('.body')?.textContent === 'question 3';
	})()`)

	openTab(b, "log")
	b.waitFor("the event log lists the newest 500 events, the last one last", `(() => {
		const rows = [...document.querySelectorAll('[data-testid="log-row"]')];
		return rows.length === 500 && rows.at(-1).dataset.seq === '2100' && document.querySelector('[data-testid="log-earlier"]');
	})()`)
	b.screenshot("long")
}

// TestDashboard_LongTranscriptDrawsItsEndBeforeReadingTheRest: the newest
// page of a long log is drawn while the pages before it are still being
// read; once they are in, the event log counts every event and the turns
// above are drawn in order as the reader scrolls up.
func TestDashboard_LongTranscriptDrawsItsEndBeforeReadingTheRest(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	child := seedLongLog(t, srv)
	g := newGate()
	srv.earlier.Store(g)
	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+child)
	select {
	case <-g.asked:
	case <-time.After(waitTimeout):
		t.Fatal("the page never read the earlier part of the log")
	}
	b.waitFor("the transcript shows its last answer while the earlier part is being read", assistantSays("answer 300", "final")+
		` && document.querySelector('[data-testid="conv-earlier"]')?.textContent === 'Reading earlier messages…'`)
	if n := eval[string](b, "reading the event count", `document.querySelector('#log-count').textContent`); n == "(2101)" {
		t.Fatalf("the event log counts %s before the earlier part was read", n)
	}
	close(g.open)
	b.waitFor("the earlier part is counted and offered", `document.querySelector('#log-count').textContent === '(2101)'`+
		` && document.querySelector('[data-testid="conv-earlier"]')?.textContent.includes('earlier event')`)
	if !eval[bool](b, "scrolling up until every turn is drawn", `(async () => {
		const sc = document.getElementById('pane-conv');
		for (let i = 0; i < 100 && document.querySelector('[data-testid="conv-earlier"]'); i++) {
			sc.scrollTop = 0;
			await new Promise((r) => setTimeout(r, 20));
		}
		const qs = [...document.querySelectorAll('[data-testid="msg-user"]')].map((m) => m.querySelector('.body').textContent);
		return qs.length === 300 && qs.every((q, i) => q === 'question ' + (i + 1));
	})()`) {
		t.Fatal("scrolled to the top, the conversation does not show the 300 questions in order")
	}
	openTab(b, "log")
	b.waitFor("the event log lists the newest 500 events, the last one last", `(() => {
		const rows = [...document.querySelectorAll('[data-testid="log-row"]')];
		return rows.length === 500 && rows.at(-1).dataset.seq === '2100' && document.querySelector('[data-testid="log-earlier"]');
	})()`)
}

// TestDashboard_LongTranscriptSaysWhenItsEarlierPartCannotBeRead: the
// drawn end stays and the top of the conversation says why nothing is
// above it.
func TestDashboard_LongTranscriptSaysWhenItsEarlierPartCannotBeRead(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	child := seedLongLog(t, srv)
	g := newGate()
	g.refuse = true
	srv.earlier.Store(g)
	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+child)
	b.waitFor("the transcript shows its last answer and says the earlier messages cannot be read", assistantSays("answer 300", "final")+
		` && document.querySelector('[data-testid="conv-earlier-error"]')?.textContent.includes('The earlier messages cannot be read')`)
}

// TestDashboard_LinkToAnEarlyEventOfALongLog: a link to an event far above
// the drawn end of a long log draws down to it and shows it.
func TestDashboard_LinkToAnEarlyEventOfALongLog(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	child := seedLongLog(t, srv)
	b := newBrowser(t)
	// Seq 0 is the descriptor; turn n's question is seq 1 + 7(n-1).
	openDashboard(b, srv.URL+"/#s="+child+"&e=29")
	b.waitFor("the linked question is marked and in view", `(() => {
		const hit = document.querySelector('[data-hit="29"]');
		if (!hit || !hit.textContent.includes('question 5')) return false;
		const r = hit.getBoundingClientRect();
		const p = document.getElementById('pane-conv').getBoundingClientRect();
		return r.bottom > p.top && r.top < p.bottom;
	})()`)
}
