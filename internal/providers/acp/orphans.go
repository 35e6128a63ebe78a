package acp

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// No agent outlives the service process that started it. The leader of
// each agent gets SIGKILL from the kernel when the service dies
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
//
// Whoever can write a record can make the next start kill a process
// group, so the records are trusted only in directories the service made
// itself: each is created with mode 0700, and one found existing must be
// a real directory (not a link) of this user with no group or other
// permissions (privateDir); a record must be a small regular file of this
// user. Anything else is refused, never followed.

// recordRoot is the directory of every service process's records.
func recordRoot() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("subagentd-agents-%d", os.Getuid()))
}

// privateDir creates dir with mode 0700 unless it exists, then checks it
// with checkPrivate.
func privateDir(dir string, uid int) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return checkPrivate(dir, uid, true)
}

// checkPrivate returns an error unless path (not followed if it is a link)
// is a directory (dir) or a regular file owned by uid that neither group
// nor others may write to, nor, for a directory, read or enter.
func checkPrivate(path string, uid int, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	loose := fs.FileMode(0o022)
	if dir {
		loose = 0o077
	}
	switch {
	case dir && !fi.IsDir():
		return fmt.Errorf("%s is not a directory (%v)", path, fi.Mode().Type())
	case !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%v)", path, fi.Mode().Type())
	case !ok:
		return fmt.Errorf("%s: no owner information", path)
	case int(st.Uid) != uid:
		return fmt.Errorf("%s is owned by uid %d, not by this service's uid %d", path, st.Uid, uid)
	case fi.Mode().Perm()&loose != 0:
		return fmt.Errorf("%s has mode %v: others could plant records in it", path, fi.Mode().Perm())
	}
	return nil
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
		root := recordRoot()
		ownRecords = filepath.Join(root, fmt.Sprintf("%d.%d", os.Getpid(), start))
		ownRecordsErr = privateDir(root, os.Getuid())
		if ownRecordsErr == nil {
			ownRecordsErr = privateDir(ownRecords, os.Getuid())
		}
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
// could not read or remove, or refused to trust: when the record directory
// is not private to this user (checkPrivate), nothing is killed.
func ReapOrphans(log *slog.Logger) (int, error) {
	root := recordRoot()
	uid := os.Getuid()
	if err := checkPrivate(root, uid, true); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("reap orphaned agents: refusing the records: %w", err)
	}
	owners, err := os.ReadDir(root)
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
		if err := checkPrivate(dir, uid, true); err != nil {
			errs = append(errs, fmt.Errorf("reap orphaned agents: refusing the records: %w", err))
			continue
		}
		n, err := reapOwner(dir, log.With(slog.Int("owner_pid", pid)))
		killed += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return killed, errors.Join(errs...)
}

// reapOwner kills the live groups recorded in dir, the checked record
// directory of a service process that no longer runs, and removes it.
func reapOwner(dir string, log *slog.Logger) (int, error) {
	groups, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("reap orphaned agents: %w", err)
	}
	var errs []error
	killed := 0
	for _, g := range groups {
		file := filepath.Join(dir, g.Name())
		pgid, ok := readRecord(file)
		if ok && groupAlive(pgid) {
			killed++
			log.Warn("killing an agent process group its dead service process left behind", slog.Int("pgid", pgid))
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill orphaned agent group %d: %w", pgid, err))
				continue
			}
		}
		if err := os.Remove(file); err != nil {
			errs = append(errs, fmt.Errorf("reap orphaned agents: %w", err))
		}
	}
	if err := os.Remove(dir); err != nil {
		errs = append(errs, fmt.Errorf("reap orphaned agents: %w", err))
	}
	return killed, errors.Join(errs...)
}

// maxRecord bounds a record file: a start time in decimal.
const maxRecord = 20

// readRecord returns the process group a record file names, if the record
// is sound and the group is still the one recorded: the file is a small
// regular file of this user (checkPrivate), its name a group id other
// than init's and this process's own, its content a start time, and the
// group's leader is gone (its id cannot be reused while the group has
// members) or runs with the recorded start time.
func readRecord(file string) (pgid int, ok bool) {
	pgid, err := strconv.Atoi(filepath.Base(file))
	if err != nil || pgid <= 1 || pgid == syscall.Getpgrp() {
		return 0, false
	}
	if checkPrivate(file, os.Getuid(), false) != nil {
		return 0, false
	}
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil || len(data) > maxRecord {
		return 0, false
	}
	recorded, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, false
	}
	start, alive := procStart(pgid)
	return pgid, !alive || start == recorded
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
