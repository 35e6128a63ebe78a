// EventStream wraps EventSource with what a dashboard needs on a flaky link:
// a connection state for the indicator, resume after the last seen id,
// de-duplication by event id, and (for session logs, whose ids are the
// contiguous seq) gap repair so that no row is ever shown twice or skipped.
//
// Resume: while EventSource retries by itself (server closed the stream or
// the connection dropped) it sends Last-Event-ID. When it gives up (an HTTP
// error, a wrong content type) the stream is recreated after a back-off with
// ?after=<last id>. Events with an id at or below the last delivered one are
// dropped, so overlapping replays are harmless.

const MIN_DELAY = 1000;
const MAX_DELAY = 15000;

export class EventStream {
  /**
   * @param {string} url stream path, without ?after
   * @param {object} o
   * @param {string[]} o.types event names to deliver (EventSource only reports named events it listens for)
   * @param {(ev: {id: number|null, type: string, data: any}) => void} o.onEvent
   * @param {(state: string, detail?: string) => void} [o.onState] connecting | connected | reconnecting | offline
   * @param {(o: {resumed: boolean}) => void} [o.onOpen] the stream is open (the server subscribed us), first time or
   *   again; resumed says it continues after a cursor, so nothing was missed
   * @param {number|null} [o.after] resume after this id on the first connection
   * @param {boolean} [o.contiguous] ids are 0,1,2,… (session seqs): a gap is repaired with fill
   * @param {(after: number|null, until: number) => Promise<{id: number, type: string, data: any}[]>} [o.fill]
   *   fetches the events after `after` (null: from the start) up to, excluding, `until`
   * @param {() => Promise<any>} [o.probe] when the server refuses the stream, a plain request to the
   *   same resource: if it fails with a client error (4xx but 429) the stream stops for good
   * @param {(err: Error) => void} [o.onFail] the stream stopped for good; err says why
   */
  constructor(url, o) {
    this.url = url;
    this.o = o;
    this.lastId = o.after ?? null;
    this.es = null;
    this.delay = MIN_DELAY;
    this.timer = 0;
    this.closed = false;
    this.opened = false;
    this.chain = Promise.resolve();
    this.state = '';
    this.onOnline = () => {
      if (this.state === 'offline') this.reopen();
    };
    this.onOffline = () => this.setState('offline', 'the browser is offline');
  }

  start() {
    window.addEventListener('online', this.onOnline);
    window.addEventListener('offline', this.onOffline);
    this.open();
    return this;
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    window.removeEventListener('online', this.onOnline);
    window.removeEventListener('offline', this.onOffline);
    if (this.es) this.es.close();
    this.es = null;
  }

  open() {
    if (this.closed) return;
    const u = new URL(this.url, location.href);
    if (this.lastId !== null) u.searchParams.set('after', String(this.lastId));
    const es = new EventSource(u);
    this.es = es;
    // A new EventSource resumes only when it was given ?after=; its own
    // reconnects resume with Last-Event-ID (a live stream names its cursor
    // in its first frame).
    let resumes = this.lastId !== null;
    this.setState(this.opened ? 'reconnecting' : 'connecting');
    es.onopen = () => {
      if (es !== this.es) return;
      this.delay = MIN_DELAY;
      this.setState('connected');
      this.opened = true;
      const resumed = resumes;
      resumes = true;
      if (this.o.onOpen) this.o.onOpen({ resumed });
    };
    es.onerror = () => {
      if (es !== this.es) return;
      if (es.readyState === EventSource.CLOSED) this.refused();
      else this.setState(navigator.onLine === false ? 'offline' : 'reconnecting');
    };
    const listener = (type) => (ev) => {
      if (ev.target !== this.es) return;
      this.enqueue(type, ev);
    };
    for (const t of this.o.types) es.addEventListener(t, listener(t));
    es.onmessage = listener('message');
  }

  /** Closes the current connection and opens a new one after the last delivered id. */
  reopen() {
    clearTimeout(this.timer);
    if (this.es) this.es.close();
    this.es = null;
    this.open();
  }

  // refused handles a stream the server would not open: a missing resource
  // ends it, anything else (5xx, network, wrong content type) is retried.
  async refused() {
    if (this.es) this.es.close();
    this.es = null;
    if (this.o.probe) {
      try {
        await this.o.probe();
      } catch (err) {
        if (err && err.status >= 400 && err.status < 500 && err.status !== 429) {
          this.close();
          this.setState('failed');
          if (this.o.onFail) this.o.onFail(err);
          return;
        }
      }
    }
    this.retryLater();
  }

  retryLater() {
    if (this.es) this.es.close();
    this.es = null;
    const wait = this.delay;
    this.delay = Math.min(this.delay * 2, MAX_DELAY);
    this.setState('offline', `retrying in ${Math.round(wait / 1000)}s`);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.open(), wait);
  }

  setState(state, detail = '') {
    this.state = state;
    if (this.o.onState) this.o.onState(state, detail);
  }

  enqueue(type, ev) {
    const raw = ev.lastEventId;
    const id = raw === '' || raw === undefined ? null : Number(raw);
    let data = ev.data;
    try {
      data = JSON.parse(ev.data);
    } catch {
      // not JSON: deliver the text as is
    }
    // Events are handled one at a time so that a gap repair finishes before
    // the next live event is considered.
    this.chain = this.chain
      .then(() => this.process({ id: Number.isFinite(id) ? id : null, type, data }))
      .catch((err) => console.error('event handling failed', err));
  }

  async process(ev) {
    if (this.closed) return;
    if (ev.id !== null) {
      if (this.lastId !== null && ev.id <= this.lastId) return;
      const expected = this.lastId === null ? 0 : this.lastId + 1;
      if (this.o.contiguous && ev.id > expected) {
        let missing = [];
        try {
          missing = this.o.fill ? await this.o.fill(this.lastId, ev.id) : [];
        } catch {
          this.retryLater();
          return;
        }
        for (const m of missing) this.deliver(m);
        if (this.lastId === null ? ev.id !== 0 : this.lastId + 1 !== ev.id) {
          // Still a hole: replay from the last delivered id instead.
          this.reopen();
          return;
        }
      }
    }
    this.deliver(ev);
  }

  deliver(ev) {
    if (this.closed) return;
    if (ev.id !== null) {
      if (this.lastId !== null && ev.id <= this.lastId) return;
      if (this.o.contiguous && ev.id !== (this.lastId === null ? 0 : this.lastId + 1)) return;
      this.lastId = ev.id;
    }
    this.o.onEvent(ev);
  }
}
