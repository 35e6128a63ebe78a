package acp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one ACP agent subprocess: the leader of its own process group,
// with our ends of its stdio pipes. The pipes are plain os.Pipe files handed
// to the child directly, so no copying goroutine ties Wait to descendants
// that inherited them, and the ACP connection reads stdout to its true end.
type process struct {
	log    *slog.Logger
	pgid   int
	stdin  *os.File // our write end: closing it is the agent's EOF
	stdout *os.File // our read end, read by the ACP connection
	stderr *os.File // our read end, copied to the log

	exited     chan struct{} // closed once the leader has been reaped
	state      *os.ProcessState
	stderrDone chan struct{}
}

// spawn starts command in dir with env, in a new process group that is
// recorded until it is gone (orphans.go). The leader is killed by the
// kernel when the service dies (Pdeathsig; the service never ends the OS
// thread that forked it, as Go only does for threads locked by a goroutine
// that exits).
func spawn(command string, args []string, dir string, env []string, log *slog.Logger) (*process, error) {
	var files []*os.File // every pipe end, closed again if the start fails
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err1 := pipe()
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		closeFiles(files...)
		return nil, fmt.Errorf("pipe: %w", err)
	}
	cmd := exec.Command(command, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err := cmd.Start()
	closeFiles(inR, outW, errW) // the child holds its own copies
	if err != nil {
		closeFiles(inW, outR, errR)
		return nil, err
	}
	if err := record(cmd.Process.Pid); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		closeFiles(inW, outR, errR)
		return nil, err
	}
	p := &process{
		log: log, pgid: cmd.Process.Pid,
		stdin: inW, stdout: outR, stderr: errR,
		exited: make(chan struct{}), stderrDone: make(chan struct{}),
	}
	go func() {
		_ = cmd.Wait() // the exit status is in ProcessState
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	go p.copyStderr()
	return p, nil
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// copyStderr logs the agent's stderr line by line, at debug level (agents
// may print their configuration), until every process that inherited it is
// gone or stop closes our end. It keeps reading past a line too long to
// log, so an agent never blocks on a full stderr pipe.
func (p *process) copyStderr() {
	defer close(p.stderrDone)
	sc := bufio.NewScanner(p.stderr)
	for sc.Scan() {
		p.log.Debug("agent stderr", slog.String("line", sc.Text()))
	}
	if sc.Err() != nil {
		p.log.Debug("agent stderr line too long to log; discarding the rest", slog.Any("error", sc.Err()))
		_, _ = io.Copy(io.Discard, p.stderr)
	}
}

// exitDescription says how the leader ended, for diagnostics; call it only
// after exited is closed.
func (p *process) exitDescription() string {
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("agent process was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("agent process exited (exit code %d)", p.state.ExitCode())
}

// killWait bounds the wait for a process group after SIGKILL, which only a
// process stuck in the kernel survives.
const killWait = 5 * time.Second

// stop is the teardown ladder (docs/seam.md §2): close stdin and wait eofGrace
// for the whole group to exit by itself, then SIGTERM the group and wait
// grace, then SIGKILL it and wait killWait. It then closes our pipe ends, which
// ends the ACP connection and the stderr copy even if a process that left
// the group still holds them. It returns an error only when the group
// survived SIGKILL; then its record stays for the next start to reap.
func (p *process) stop(eofGrace, grace time.Duration) error {
	p.stdin.Close()
	var err error
	if !p.waitGone(eofGrace) {
		p.signal(syscall.SIGTERM)
		if !p.waitGone(grace) {
			p.signal(syscall.SIGKILL)
			if !p.waitGone(killWait) {
				err = fmt.Errorf("agent process group %d is still alive after SIGKILL", p.pgid)
			}
		}
	}
	if err == nil {
		forget(p.pgid, p.log)
	}
	p.stdout.Close()
	p.stderr.Close()
	<-p.stderrDone
	return err
}

func (p *process) signal(sig syscall.Signal) {
	p.log.Debug("signalling agent process group", slog.Int("pgid", p.pgid), slog.String("signal", sig.String()))
	if err := syscall.Kill(-p.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.log.Warn("cannot signal agent process group", slog.Int("pgid", p.pgid), slog.Any("error", err))
	}
}

// waitGone waits up to d until the leader has been reaped and no live
// process is left in its group. The leader is waited for; the rest of the
// group can only be polled, which happens at most every groupPoll.
func (p *process) waitGone(d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	select {
	case <-p.exited:
	case <-deadline.C:
		return false
	}
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	for groupAlive(p.pgid) {
		select {
		case <-tick.C:
		case <-deadline.C:
			return false
		}
	}
	return true
}

const groupPoll = 10 * time.Millisecond

// groupAlive reports whether process group pgid has a member that is not a
// zombie. kill(-pgid, 0) also counts zombies, which hold nothing but a pid
// until their new parent reaps them — and some container inits reap late —
// so where /proc exists the members are checked one by one.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if state, pgrp, ok := parseStat(stat); ok && pgrp == pgid && state != "Z" {
			return true
		}
	}
	return false
}

// parseStat reads the state and process group of a /proc/<pid>/stat line:
// "pid (comm) state ppid pgrp …", where comm may hold spaces and parentheses.
func parseStat(stat []byte) (state string, pgrp int, ok bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 3 {
		return "", 0, false
	}
	pgrp, err := strconv.Atoi(f[2])
	return f[0], pgrp, err == nil
}

// inheritedEnv are the only variables of the service environment an agent
// inherits: what a program needs to find its tools, its home, its locale,
// its terminal and its temporary directory. Everything else — credentials
// whatever their names, DSNs, the service's own settings — stays with the
// service; what an agent needs besides is named in its provider's env.
var inheritedEnv = []string{"PATH", "HOME", "LANG", "TERM", "TMPDIR"}

// childEnv is the agent's environment: the inheritedEnv variables of
// environ, then the configured entries, which win.
func childEnv(environ []string, extra map[string]string) []string {
	env := make([]string, 0, len(inheritedEnv)+len(extra))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, set := extra[name]; !set && slices.Contains(inheritedEnv, name) {
			env = append(env, kv)
		}
	}
	names := make([]string, 0, len(extra))
	for name := range extra {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		env = append(env, name+"="+extra[name])
	}
	return env
}
