// baton-bridge serves one stdio MCP server (the child: COMMAND [ARGS...], JSON-RPC one message
// a line on its stdin/stdout) over MCP streamable HTTP to several clients at once, counts the
// calls in flight for the drain, and ends the child the specification's way: stdin closed
// (EOF), then SIGTERM, then SIGKILL, each bounded. Standard library only; built static
// (CGO_ENABLED=0) so it runs in any Linux image. docs/gateway.md, "stdio runtimes".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// The kubelet keeps at most this much of the termination log.
const terminationLogLimit = 4096

type Config struct {
	Listen            string
	Path              string
	DrainSeconds      float64
	EOFSeconds        float64
	TermSeconds       float64
	InitSeconds       float64
	MaxLineBytes      int
	ClientBufferBytes int
	TerminationLog    string
	Command           []string
}

func parseFlags(args []string, errOut io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("baton-bridge", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&c.Listen, "listen", "0.0.0.0:8080", "address:port to serve MCP and /baton/* on")
	fs.StringVar(&c.Path, "path", "/mcp", "the MCP endpoint's path")
	fs.Float64Var(&c.DrainSeconds, "drain-seconds", 30, "on SIGTERM, how long to wait for calls in flight")
	fs.Float64Var(&c.EOFSeconds, "eof-seconds", 5, "after closing the child's stdin, how long to wait before SIGTERM")
	fs.Float64Var(&c.TermSeconds, "term-seconds", 5, "after SIGTERM, how long to wait before SIGKILL")
	fs.Float64Var(&c.InitSeconds, "init-seconds", 30, "how long the child has to answer the bridge's initialize")
	fs.IntVar(&c.MaxLineBytes, "max-line-bytes", 4194304, "longest line (message) read from the child or body accepted from a client")
	fs.IntVar(&c.ClientBufferBytes, "client-buffer-bytes", 4194304, "bytes queued for one client stream before it is ended")
	fs.StringVar(&c.TerminationLog, "termination-log", "/dev/termination-log", "file the exit reason and stderr tail are written to (empty: none)")
	fs.Usage = func() {
		fmt.Fprintln(errOut, "usage: baton-bridge [flags] -- COMMAND [ARGS...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.Command = fs.Args()
	if len(c.Command) == 0 {
		return c, errors.New("COMMAND missing: baton-bridge [flags] -- COMMAND [ARGS...]")
	}
	for name, v := range map[string]float64{"--drain-seconds": c.DrainSeconds, "--eof-seconds": c.EOFSeconds,
		"--term-seconds": c.TermSeconds, "--init-seconds": c.InitSeconds} {
		if v < 0 {
			return c, fmt.Errorf("%s must be >= 0, got %v", name, v)
		}
	}
	if c.MaxLineBytes < 1024 {
		return c, fmt.Errorf("--max-line-bytes must be >= 1024, got %d", c.MaxLineBytes)
	}
	if c.ClientBufferBytes < 1024 {
		return c, fmt.Errorf("--client-buffer-bytes must be >= 1024, got %d", c.ClientBufferBytes)
	}
	if len(c.Path) == 0 || c.Path[0] != '/' || c.Path == "/baton/ready" || c.Path == "/baton/drain" {
		return c, fmt.Errorf("--path must start with / and not be /baton/ready or /baton/drain, got %q", c.Path)
	}
	return c, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "baton-bridge:", err)
		os.Exit(2)
	}
	os.Exit(run(cfg))
}

// Child is the stdio server process.
type Child struct {
	cmd       *exec.Cmd
	stdin     *os.File
	tail      *TailRing
	exited    chan struct{} // closed once Wait returned
	status    int           // its exit status, 128+signal for a signal
	stderrEOF chan struct{} // closed once its stderr reached EOF
}

func startChild(cfg Config, tail *TailRing) (*Child, *os.File, error) {
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	// *os.File ends: exec copies nothing, so Wait returns when the process exits and never
	// waits on (or closes) the bridge's ends.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	// Its own process group (pgid = its pid): a wrapper's grandchildren (`npx`, `sh -c`, `uv
	// run`) are signalled with it, never left running after the shutdown.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	_ = inR.Close()
	_ = outW.Close()
	_ = errW.Close()
	c := &Child{cmd: cmd, stdin: inW, tail: tail, exited: make(chan struct{}), stderrEOF: make(chan struct{})}
	go func() {
		defer close(c.stderrEOF)
		buf := make([]byte, 32*1024)
		for {
			n, err := errR.Read(buf)
			if n > 0 {
				passStderr(buf[:n])
				_, _ = tail.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		c.status = exitStatus(cmd.ProcessState)
		close(c.exited)
	}()
	return c, outR, nil
}

func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signal sends sig to the child's whole process group. The group's id stays reserved while
// any member lives, even once the child itself is reaped, so this never reaches a stranger.
func (c *Child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
}

// groupAlive: whether the child or any process of its group is still running. Once the child is
// reaped, zombies of the group the bridge inherited (as a container's PID 1 it is their reaper)
// are reaped first so that they do not count.
func (c *Child) groupAlive() bool {
	select {
	case <-c.exited:
	default:
		return true
	}
	pgid := c.cmd.Process.Pid
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			break
		}
	}
	return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// waitExit waits within d for the child and every process of its group to exit; true if they did.
func (c *Child) waitExit(d time.Duration) bool {
	deadline := time.Now().Add(d)
	exited := c.exited
	for c.groupAlive() {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		// The child's own exit wakes us at once; the rest of the group is polled.
		t := time.NewTimer(min(left, 10*time.Millisecond))
		select {
		case <-exited:
			exited = nil // closed: from now on only the poll wakes us (no spin on a closed channel)
		case <-t.C:
		}
		t.Stop()
	}
	return true
}

// stderrTail waits briefly for the child's stderr to reach EOF (its last lines may still be in
// the pipe when it exits), then returns the tail.
func (c *Child) stderrTail() string {
	select {
	case <-c.stderrEOF:
	case <-time.After(time.Second):
	}
	return c.tail.Tail()
}

func writeTerminationLog(path, msg string) {
	if path == "" {
		return
	}
	if err := os.WriteFile(path, []byte(msg), 0o644); err != nil {
		logEvent("error", "writing the termination log failed", "path", path, "error", err.Error())
	}
}

func run(cfg Config) int {
	tail := NewTailRing(terminationLogLimit)
	child, stdout, err := startChild(cfg, tail)
	if err != nil {
		msg := fmt.Sprintf("the child did not start: %v", err)
		logEvent("error", msg, "command", cfg.Command)
		writeTerminationLog(cfg.TerminationLog, msg)
		return 127
	}
	logEvent("info", "the child started", "pid", child.cmd.Process.Pid, "command", cfg.Command)
	var writeMu = make(chan struct{}, 1)
	write := func(line []byte) error {
		writeMu <- struct{}{}
		defer func() { <-writeMu }()
		_, err := child.stdin.Write(append(line, '\n'))
		return err
	}
	router := NewRouter(write, cfg.ClientBufferBytes)
	stdoutDone := make(chan struct{})
	go func() {
		defer close(stdoutDone)
		router.ReadChild(stdout, cfg.MaxLineBytes)
	}()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		msg := fmt.Sprintf("listening on %s failed: %v", cfg.Listen, err)
		logEvent("error", msg)
		endChild(cfg, child, router, "listen failed")
		writeTerminationLog(cfg.TerminationLog, TerminationMessage(msg, child.stderrTail(), terminationLogLimit))
		return 1
	}
	srv := &http.Server{Handler: (&Server{router: router, path: cfg.Path, maxBody: int64(cfg.MaxLineBytes)}).Handler(),
		ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logEvent("error", "the HTTP server failed", "error", err.Error())
		}
	}()
	logEvent("info", "listening", "listen", ln.Addr().String(), "path", cfg.Path)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	if err := router.SendInitialize(); err != nil {
		logEvent("warning", "writing initialize to the child failed", "error", err.Error())
	}
	initTimer := time.NewTimer(seconds(cfg.InitSeconds))
	defer initTimer.Stop()
	initDone := router.initDone

	for {
		select {
		case <-initDone:
			initDone = nil
			initTimer.Stop()
			if router.initErr != nil {
				logEvent("error", router.initErr.Error())
				endChild(cfg, child, router, "initialize failed")
				writeTerminationLog(cfg.TerminationLog, TerminationMessage(router.initErr.Error(), child.stderrTail(), terminationLogLimit))
				return 1
			}
		case <-initTimer.C:
			if router.ready.Load() {
				continue
			}
			reason := fmt.Sprintf("the child did not answer initialize within %gs", cfg.InitSeconds)
			logEvent("error", reason)
			endChild(cfg, child, router, "initialize timed out")
			writeTerminationLog(cfg.TerminationLog, TerminationMessage(reason, child.stderrTail(), terminationLogLimit))
			return 1
		case <-child.exited:
			// The child ended on its own: its status is the bridge's.
			router.draining.Store(true)
			<-waitOr(stdoutDone, time.Second)
			reason := fmt.Sprintf("exit status %d", child.status)
			router.FailAll("the child exited (" + reason + ")")
			logEvent("error", "the child exited on its own", "status", child.status, "calls", router.InflightCalls())
			// A wrapper gone, its grandchildren are not: they are ended as in a shutdown.
			endChild(cfg, child, router, "the child exited on its own")
			writeTerminationLog(cfg.TerminationLog, TerminationMessage(reason, child.stderrTail(), terminationLogLimit))
			shutdownHTTP(srv)
			return child.status
		case s := <-sigs:
			logEvent("info", "signal: draining", "signal", s.String())
			status, cut := shutdown(cfg, child, router)
			reason := fmt.Sprintf("exit status %d", status)
			if len(cut) > 0 {
				reason = fmt.Sprintf("drain cut %d call(s) %s; %s", len(cut), cutIDs(cut), reason)
			}
			writeTerminationLog(cfg.TerminationLog, TerminationMessage(reason, child.stderrTail(), terminationLogLimit))
			shutdownHTTP(srv)
			return status
		}
	}
}

func waitOr(ch <-chan struct{}, d time.Duration) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		defer close(out)
		select {
		case <-ch:
		case <-time.After(d):
		}
	}()
	return out
}

func cutIDs(cut []CutCall) string {
	s := "["
	for i, c := range cut {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s:%s", c.Method, c.ClientID)
	}
	return s + "]"
}

func shutdownHTTP(srv *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

// shutdown is the contract's order: admission stopped, calls in flight waited for within
// --drain-seconds, stdin closed (EOF), --eof-seconds, SIGTERM, --term-seconds, SIGKILL. One log
// line a step. Returns the child's exit status and the calls cut.
func shutdown(cfg Config, child *Child, router *Router) (int, []CutCall) {
	router.draining.Store(true)
	router.EndListeners()
	logEvent("info", "drain: admission stopped (new calls 503)", "inflight", router.Inflight())
	deadline := time.Now().Add(seconds(cfg.DrainSeconds))
	for router.Inflight() > 0 && time.Now().Before(deadline) {
		select {
		case <-child.exited:
			deadline = time.Now()
		case <-time.After(10 * time.Millisecond):
		}
	}
	cut := router.InflightCalls()
	if len(cut) > 0 {
		logEvent("warning", "drain: --drain-seconds passed with calls in flight: cut", "drainSeconds", cfg.DrainSeconds, "cut", cut)
	} else {
		logEvent("info", "drain: no call in flight")
	}
	endChild(cfg, child, router, "shutdown")
	return child.status, cut
}

// endChild: EOF, wait, SIGTERM, wait, SIGKILL; the signals go to the child's process group and
// each wait lasts until the whole group is gone, so a wrapper's grandchildren end with it. A
// child that already exited on its own still has its group's survivors ended the same way.
func endChild(cfg Config, child *Child, router *Router, why string) {
	router.draining.Store(true)
	router.EndListeners()
	select {
	case <-child.exited:
		logEvent("info", "the child had already exited", "status", child.status, "why", why)
	default:
	}
	if !child.groupAlive() {
		router.FailAll("the child exited")
		return
	}
	_ = child.stdin.Close()
	logEvent("info", "closed the child's stdin (EOF)", "eofSeconds", cfg.EOFSeconds, "why", why)
	if !child.waitExit(seconds(cfg.EOFSeconds)) {
		child.signal(syscall.SIGTERM)
		logEvent("warning", "the child did not exit on EOF: sent SIGTERM", "termSeconds", cfg.TermSeconds, "to", "its process group")
		if !child.waitExit(seconds(cfg.TermSeconds)) {
			child.signal(syscall.SIGKILL)
			logEvent("warning", "the child did not exit on SIGTERM: sent SIGKILL", "to", "its process group")
			<-child.exited
			// SIGKILL cannot be ignored; bounded anyway (a process stuck in the kernel).
			if !child.waitExit(5 * time.Second) {
				logEvent("error", "processes of the child's group remain 5s after SIGKILL", "pgid", child.cmd.Process.Pid)
			}
		}
	}
	logEvent("info", "the child exited", "status", child.status)
	router.FailAll("the child exited")
}
