package acp

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// sleeperGroup starts the fake agent as a sleeper that leads its own
// process group, killed when the test ends, and returns its pid and the
// record content that names it (its start time).
func sleeperGroup(t *testing.T) (pid int, record []byte) {
	t.Helper()
	sleeper := exec.Command(fakeAgent)
	sleeper.Env = append(os.Environ(), "FAKE_MODE=sleeper")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleeper.Wait(); close(exited) }()
	t.Cleanup(func() { _ = sleeper.Process.Kill(); <-exited })
	start, ok := procStart(sleeper.Process.Pid)
	if !ok {
		t.Fatal("the sleeper is gone")
	}
	return sleeper.Process.Pid, []byte(strconv.FormatUint(start, 10))
}

// A record directory the service did not make itself — loose permissions,
// another owner, a link — is not trusted: nothing it lists is killed, and
// ReapOrphans says why.
func TestReapOrphans_DistrustsRecordsItDidNotMake(t *testing.T) {
	// Not parallel: it points TMPDIR, where the records live, elsewhere.
	pid, record := sleeperGroup(t)
	pgid := strconv.Itoa(pid)
	const deadOwner = "999999999.1" // no such pid
	foreign := func(path string) {
		if err := os.Lchown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		// plant writes a dead owner's record of the sleeper's group under
		// root, in a way the reaper must distrust.
		plant   func(t *testing.T, root string)
		wantErr string // "" when the record is dropped without an error
		root    bool   // needs root (chown)
	}{
		{"loose root", func(t *testing.T, root string) {
			writeRecord(t, filepath.Join(root, deadOwner), pgid, record)
			chmod(t, root, 0o777)
		}, "has mode -rwxrwxrwx", false},
		{"group-readable root", func(t *testing.T, root string) {
			writeRecord(t, filepath.Join(root, deadOwner), pgid, record)
			chmod(t, root, 0o750)
		}, "has mode -rwxr-x---", false},
		{"foreign root", func(t *testing.T, root string) {
			writeRecord(t, filepath.Join(root, deadOwner), pgid, record)
			foreign(root)
		}, "is owned by uid 65534", true},
		{"root is a link", func(t *testing.T, root string) {
			elsewhere := filepath.Join(t.TempDir(), "records")
			writeRecord(t, filepath.Join(elsewhere, deadOwner), pgid, record)
			if err := os.Symlink(elsewhere, root); err != nil {
				t.Fatal(err)
			}
		}, "is not a directory", false},
		{"loose owner directory", func(t *testing.T, root string) {
			writeRecord(t, filepath.Join(root, deadOwner), pgid, record)
			chmod(t, filepath.Join(root, deadOwner), 0o777)
		}, "has mode -rwxrwxrwx", false},
		{"foreign owner directory", func(t *testing.T, root string) {
			writeRecord(t, filepath.Join(root, deadOwner), pgid, record)
			foreign(filepath.Join(root, deadOwner))
		}, "is owned by uid 65534", true},
		{"world-writable record", func(t *testing.T, root string) {
			writeRecord(t, filepath.Join(root, deadOwner), pgid, record)
			chmod(t, filepath.Join(root, deadOwner, pgid), 0o666)
		}, "", false},
		{"foreign record", func(t *testing.T, root string) {
			writeRecord(t, filepath.Join(root, deadOwner), pgid, record)
			foreign(filepath.Join(root, deadOwner, pgid))
		}, "", true},
		{"record is a link", func(t *testing.T, root string) {
			target := filepath.Join(t.TempDir(), "target")
			if err := os.WriteFile(target, record, 0o600); err != nil {
				t.Fatal(err)
			}
			writeRecord(t, filepath.Join(root, deadOwner), "1", []byte("0")) // makes the directory
			if err := os.Symlink(target, filepath.Join(root, deadOwner, pgid)); err != nil {
				t.Fatal(err)
			}
		}, "", false},
		{"oversized record", func(t *testing.T, root string) {
			writeRecord(t, filepath.Join(root, deadOwner), pgid, append(record, []byte(strings.Repeat(" ", maxRecord))...))
		}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Getuid() != 0 {
				t.Skip("needs root to make a file another user's (chown)")
			}
			t.Setenv("TMPDIR", t.TempDir())
			root := recordRoot()
			tt.plant(t, root)
			n, err := ReapOrphans(slog.Default())
			if n != 0 || !alive(t, pid) {
				t.Fatalf("ReapOrphans = %d, %v: it killed a group listed by a record it must not trust", n, err)
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("ReapOrphans error %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
	// The same record in a directory the service made is acted on.
	t.Setenv("TMPDIR", t.TempDir())
	root := recordRoot()
	for _, dir := range []string{root, filepath.Join(root, deadOwner)} {
		if err := privateDir(dir, os.Getuid()); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, deadOwner, pgid), record, 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := ReapOrphans(slog.Default()); n != 1 || err != nil {
		t.Fatalf("ReapOrphans = %d, %v; want the group of a sound record killed", n, err)
	}
}

// writeRecord writes a record of group name into dir, made (with its
// parents) private as the service makes them.
func writeRecord(t *testing.T, dir, name string, content []byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestPrivateDir(t *testing.T) {
	t.Parallel()
	uid := os.Getuid()
	base := t.TempDir()
	made := filepath.Join(base, "made")
	if err := privateDir(made, uid); err != nil {
		t.Fatalf("privateDir of a new directory: %v", err)
	}
	if fi, err := os.Stat(made); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v, %v; want mode 0700", fi.Mode(), err)
	}
	if err := privateDir(made, uid); err != nil {
		t.Fatalf("privateDir of its own directory again: %v", err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(made, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(base, "loose")
	if err := os.Mkdir(loose, 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, loose, 0o701)
	tests := []struct {
		dir  string
		uid  int
		want string
	}{
		{made, uid + 1, fmt.Sprintf("is owned by uid %d, not by this service's uid %d", uid, uid+1)},
		{link, uid, "is not a directory (L---------)"},
		{file, uid, "is not a directory (----------)"},
		{loose, uid, "has mode -rwx-----x"},
	}
	for _, tt := range tests {
		if err := privateDir(tt.dir, tt.uid); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("privateDir(%s, %d) = %v, want an error saying %q", tt.dir, tt.uid, err, tt.want)
		}
	}
}
