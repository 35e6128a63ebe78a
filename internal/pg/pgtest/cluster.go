package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// clusterPrefix names private cluster directories in os.TempDir():
// clusterPrefix<pid>-<random>, removed by a later test process once pid is
// gone.
const clusterPrefix = "subagentd-pgtest-"

// startCluster initdbs a throwaway cluster in a temporary directory and
// starts it on a free loopback port, as user postgres when running as root
// (postgres refuses to run as root). The server is killed when this process
// exits, however it exits; its directory is removed by a later run.
func startCluster(ctx context.Context) (string, error) {
	bin, err := postgresBin()
	if err != nil {
		return "", err
	}
	removeAbandonedClusters()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", clusterPrefix, os.Getpid()))
	if err != nil {
		return "", err
	}
	cred, err := credential(dir)
	if err != nil {
		return "", err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "-N", "--no-instructions")
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	initdb.Dir, initdb.SysProcAttr = dir, &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	srv := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300")
	srv.Env, srv.Dir = append(os.Environ(), "LC_ALL=C"), dir
	// Pdeathsig: the kernel sends SIGQUIT (immediate shutdown) when the thread
	// that started postgres exits, so the goroutine below keeps it locked.
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	logs, err := srv.StderrPipe()
	if err != nil {
		return "", err
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := srv.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = srv.Wait()
	}()
	if err := <-started; err != nil {
		return "", fmt.Errorf("start postgres: %w", err)
	}
	if err := waitReady(ctx, logs); err != nil {
		_ = srv.Process.Kill()
		return "", err
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port), nil
}

// waitReady reads the server log until the server is ready, then keeps
// draining it so the server never blocks on a full pipe.
func waitReady(ctx context.Context, logs io.Reader) error {
	ready := make(chan error, 1)
	go func() {
		var seen []string
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "database system is ready to accept connections") {
				ready <- nil
				_, _ = io.Copy(io.Discard, logs)
				return
			}
			seen = append(seen, sc.Text())
		}
		ready <- fmt.Errorf("postgres exited: %s", strings.Join(seen, "\n"))
	}()
	select {
	case err := <-ready:
		return err
	case <-ctx.Done():
		return fmt.Errorf("postgres not ready: %w", ctx.Err())
	}
}

// postgresBin finds the directory of initdb and postgres: PATH, else the
// newest /usr/lib/postgresql/*/bin (Debian keeps them off PATH).
func postgresBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(a) - version(b) })
	for _, d := range slices.Backward(dirs) {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("initdb is neither on PATH nor under /usr/lib/postgresql/*/bin")
}

// version is N of /usr/lib/postgresql/N/bin.
func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// credential returns who runs the cluster: nil (this user), or user postgres
// when running as root, which then owns dir.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and postgres must not: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// removeAbandonedClusters removes cluster directories of test processes
// that no longer run.
func removeAbandonedClusters() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), clusterPrefix+"*"))
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), clusterPrefix), "-")
		if n, err := strconv.Atoi(pid); err == nil && !alive(n) {
			_ = os.RemoveAll(d)
		}
	}
}
