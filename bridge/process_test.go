package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive: the process exists and is not a zombie waiting for its reaper.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis: "pid (comm) S ...".
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// waitGone polls (bounded) for pid to be gone: an orphan is reaped by init, not by us.
func waitGone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return !alive(pid)
}

// startWrapped starts a shell wrapper (as `npx` or `sh -c` would be) whose grandchild writes
// its pid to a file and runs `grandchild`; returns the child and the grandchild's pid.
func startWrapped(t *testing.T, grandchild string) (*Child, int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	// The wrapper does not read stdin (so EOF does not end it) and waits for its grandchild.
	script := "(" + grandchild + ") </dev/null & echo $! > " + pidFile + "; wait"
	cfg := Config{Command: []string{"/bin/sh", "-c", script}, EOFSeconds: 0.3, TermSeconds: 0.5}
	child, stdout, err := startChild(cfg, NewTailRing(terminationLogLimit))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdout.Close() })
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if pid == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if pid == 0 {
		t.Fatal("the grandchild's pid file was not written within 10s")
	}
	// Whatever the outcome, nothing this test started outlives it.
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = child.cmd.Process.Kill()
	})
	return child, pid
}

func endWrapped(t *testing.T, child *Child) {
	t.Helper()
	cfg := Config{EOFSeconds: 0.3, TermSeconds: 0.5}
	router := NewRouter(func([]byte) error { return nil }, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		endChild(cfg, child, router, "test")
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("endChild did not return within 20s")
	}
}

// A wrapper that dies on SIGTERM must not leave its grandchild running: the signal goes to the
// child's process group.
func TestShutdownEndsTheGrandchildOfAShellWrapper(t *testing.T) {
	child, grandchild := startWrapped(t, "exec sleep 300")
	endWrapped(t, child)
	if !waitGone(grandchild, 5*time.Second) {
		t.Fatalf("the grandchild (pid %d) survived the shutdown", grandchild)
	}
}

// A grandchild that ignores SIGTERM is ended by SIGKILL at the grace, even after the wrapper
// itself has exited on SIGTERM.
func TestShutdownKillsAGrandchildThatIgnoresSigterm(t *testing.T) {
	child, grandchild := startWrapped(t, "trap '' TERM; exec sleep 300")
	endWrapped(t, child)
	if !waitGone(grandchild, 5*time.Second) {
		t.Fatalf("the grandchild (pid %d), ignoring SIGTERM, survived the shutdown", grandchild)
	}
}

// A wrapper whose grandchild ends on EOF gets no signal at all: EOF first, as the spec says.
func TestShutdownByEOFSendsNoSignal(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The grandchild reads the wrapper's stdin (fd 3: a background job's own stdin is /dev/null)
	// and exits at EOF; a SIGTERM would
	// show as exit status 143 of the wrapper, which waits for it.
	script := "exec 3<&0; cat <&3 >/dev/null & echo $! > " + pidFile + "; wait $!"
	cfg := Config{Command: []string{"/bin/sh", "-c", script}, EOFSeconds: 10, TermSeconds: 10}
	child, stdout, err := startChild(cfg, NewTailRing(terminationLogLimit))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdout.Close() }()
	defer func() { _ = child.cmd.Process.Kill() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(pidFile); len(strings.TrimSpace(string(b))) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	endChild(cfg, child, NewRouter(func([]byte) error { return nil }, 4096), "test")
	if child.status != 0 {
		t.Fatalf("wrapper exit status %d, want 0 (ended by EOF, no signal)", child.status)
	}
	if took := time.Since(start); took >= 10*time.Second {
		t.Fatalf("endChild took %v: it waited past EOF", took)
	}
}

// A wrapper that exits on its own leaves no grandchild behind either: the bridge ends what is
// left of the group (EOF, SIGTERM, SIGKILL) before it exits with the wrapper's status.
func TestAWrapperExitingOnItsOwnLeavesNoGrandchild(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild.pid")
	// The grandchild is written down before the wrapper exits (status 3).
	script := "(exec sleep 300) </dev/null & echo $! > " + pidFile + "; exit 3"
	cfg := Config{Listen: "127.0.0.1:0", Path: "/mcp", InitSeconds: 30, EOFSeconds: 0.3, TermSeconds: 0.5,
		MaxLineBytes: 4096, ClientBufferBytes: 4096, TerminationLog: filepath.Join(dir, "termination-log"),
		Command: []string{"/bin/sh", "-c", script}}
	status := make(chan int, 1)
	go func() { status <- run(cfg) }()
	var got int
	select {
	case got = <-status:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of its child's exit")
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if got != 3 {
		t.Fatalf("run returned %d, want the wrapper's status 3", got)
	}
	if !waitGone(pid, 5*time.Second) {
		t.Fatalf("the grandchild (pid %d) survived its wrapper's exit", pid)
	}
}
