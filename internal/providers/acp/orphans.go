package acp

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// No agent outlives the service process that started it (issue 13). The
// leader of each agent gets SIGKILL from the kernel when the service dies
// (Pdeathsig), but its descendants do not; so every agent's process group
// is also recorded on disk, in a directory of this service process, until
// the group is gone. The next start on the machine (ReapOrphans) kills the
// groups recorded by service processes that no longer run.
//
// The records live under os.TempDir()/subagentd-agents-<uid>/, one
// directory per service process named <pid>.<start time> (so a recycled
// pid is not mistaken for the live owner), one file per process group
// named by its id and holding its leader's start time: a group whose
// leader runs with another start time is someone else's (the id was
// recycled) and is left alone.

// recordRoot is the directory of every service process's records.
func recordRoot() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("subagentd-agents-%d", os.Getuid()))
}

var (
	ownRecordsOnce sync.Once
	ownRecords     string
	ownRecordsErr  error
)

// ownRecordDir is this process's record directory, created on first use.
func ownRecordDir() (string, error) {
	ownRecordsOnce.Do(func() {
		start, ok := procStart(os.Getpid())
		if !ok {
			ownRecordsErr = errors.New("cannot read this process's start time from /proc")
			return
		}
		ownRecords = filepath.Join(recordRoot(), fmt.Sprintf("%d.%d", os.Getpid(), start))
		ownRecordsErr = os.MkdirAll(ownRecords, 0o700)
	})
	return ownRecords, ownRecordsErr
}

// record notes process group pgid, whose leader just started; forget
// removes the note once the group is gone.
func record(pgid int) error {
	dir, err := ownRecordDir()
	if err != nil {
		return fmt.Errorf("record agent process group: %w", err)
	}
	start, ok := procStart(pgid)
	if !ok {
		return fmt.Errorf("record agent process group: leader %d is gone", pgid)
	}
	if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(pgid)), []byte(strconv.FormatUint(start, 10)), 0o600); err != nil {
		return fmt.Errorf("record agent process group: %w", err)
	}
	return nil
}

func forget(pgid int, log *slog.Logger) {
	dir, err := ownRecordDir()
	if err == nil {
		err = os.Remove(filepath.Join(dir, strconv.Itoa(pgid)))
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("cannot remove the record of a reaped agent", slog.Int("pgid", pgid), slog.Any("error", err))
	}
}

// ReapOrphans kills, with SIGKILL, every agent process group recorded by
// a service process on this machine that no longer runs, and removes the
// records. Call it at start-up, before any agent starts. It returns the
// number of groups that still had processes, and the errors of records it
// could not read or remove.
func ReapOrphans(log *slog.Logger) (int, error) {
	root := recordRoot()
	owners, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reap orphaned agents: %w", err)
	}
	var errs []error
	killed := 0
	for _, o := range owners {
		pidText, startText, ok := strings.Cut(o.Name(), ".")
		pid, err1 := strconv.Atoi(pidText)
		start, err2 := strconv.ParseUint(startText, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			continue // not ours
		}
		if now, alive := procStart(pid); alive && now == start {
			continue // its service process still runs
		}
		dir := filepath.Join(root, o.Name())
		groups, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("reap orphaned agents: %w", err))
			continue
		}
		for _, g := range groups {
			pgid, err := strconv.Atoi(g.Name())
			if err != nil || pgid <= 1 {
				continue
			}
			if ours(filepath.Join(dir, g.Name()), pgid) && groupAlive(pgid) {
				killed++
				log.Warn("killing an agent process group its dead service process left behind", slog.Int("pgid", pgid), slog.Int("owner_pid", pid))
				if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					errs = append(errs, fmt.Errorf("kill orphaned agent group %d: %w", pgid, err))
					continue
				}
			}
			if err := os.Remove(filepath.Join(dir, g.Name())); err != nil {
				errs = append(errs, fmt.Errorf("reap orphaned agents: %w", err))
			}
		}
		if err := os.Remove(dir); err != nil {
			errs = append(errs, fmt.Errorf("reap orphaned agents: %w", err))
		}
	}
	return killed, errors.Join(errs...)
}

// ours reports whether group pgid is still the one recorded in file: its
// leader is gone (its id cannot be reused while the group has members) or
// runs with the recorded start time.
func ours(file string, pgid int) bool {
	data, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	recorded, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return false
	}
	start, alive := procStart(pgid)
	return !alive || start == recorded
}

// procStart is the start time of process pid (field 22 of its
// /proc/<pid>/stat, in clock ticks since boot); ok is false when it does
// not run.
func procStart(pid int) (uint64, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 || f[0] == "Z" {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return start, err == nil
}
