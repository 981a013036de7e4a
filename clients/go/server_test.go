package flockd

// Starts real flockd processes for the tests (FLOCKD_BIN, else the repository's
// target/debug/flockd) on free loopback ports, and stops each by its pid.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

type server struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned
}

func flockdBin(t *testing.T) string {
	bin := os.Getenv("FLOCKD_BIN")
	if bin == "" {
		bin = "../../target/debug/flockd"
	} else if !filepath.IsAbs(bin) {
		// CI gives it relative to the repository's root; go test runs in clients/go.
		if _, err := os.Stat(bin); err != nil {
			bin = filepath.Join("../..", bin)
		}
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("no flockd binary at %s: cargo build -p flockd, or set FLOCKD_BIN", abs)
	}
	return abs
}

var readyLine = regexp.MustCompile(`ready to accept connections on (127\.0\.0\.1:\d+)`)

// startFlockd runs flockd with args (plus --bind, --dir and, unless given, --port 0) and waits
// for its "ready" line.
func startFlockd(t *testing.T, args ...string) *server {
	t.Helper()
	dir := t.TempDir()
	full := append([]string{"--bind", "127.0.0.1", "--dir", filepath.Join(dir, "data")}, args...)
	if !containsArg(args, "--port") {
		full = append(full, "--port", "0")
	}
	logPath := filepath.Join(dir, "flockd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(flockdBin(t), full...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "FLOCKD_LOG_LEVEL=info,openraft=error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logFile.Close()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s := &server{cmd: cmd, exited: exited}
	t.Cleanup(s.kill)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		data, _ := os.ReadFile(logPath)
		if m := readyLine.FindSubmatch(data); m != nil {
			s.addr = string(m[1])
			return s
		}
		select {
		case <-exited:
			t.Fatalf("flockd exited during start-up:\n%s", data)
		case <-time.After(20 * time.Millisecond):
		}
	}
	data, _ := os.ReadFile(logPath)
	t.Fatalf("flockd never became ready:\n%s", data)
	return nil
}

// kill sends SIGKILL to the server's pid and waits for it to exit.
func (s *server) kill() {
	select {
	case <-s.exited:
		return
	default:
	}
	syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}

func (s *server) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func containsArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

// conn is a plain redigo connection to s, closed when the test ends.
func (s *server) conn(t *testing.T) redis.Conn {
	t.Helper()
	c, err := redis.Dial("tcp", s.addr, redis.DialReadTimeout(10*time.Second),
		redis.DialConnectTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// status is FLOCK.STATUS as a map of its fields.
func status(t *testing.T, c redis.Conn, name string) map[string]interface{} {
	t.Helper()
	values, err := redis.Values(c.Do("FLOCK.STATUS", name))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]interface{}{}
	for i := 0; i+1 < len(values); i += 2 {
		key, _ := redis.String(values[i], nil)
		m[key] = values[i+1]
	}
	return m
}

func freePorts(t *testing.T, n int) []int {
	var listeners []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range listeners {
		l.Close()
	}
	return ports
}

// startCluster starts a 3-node cluster and returns its nodes, once they agree on a leader.
func startCluster(t *testing.T) []*server {
	ports := freePorts(t, 6)
	var peers []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("%d=127.0.0.1:%d@%d", i+1, ports[i], ports[3+i]))
	}
	var nodes []*server
	for i := 0; i < 3; i++ {
		nodes = append(nodes, startFlockd(t, "--port", strconv.Itoa(ports[i]),
			"--node-id", strconv.Itoa(i+1), "--cluster-peers", strings.Join(peers, ",")))
	}
	return nodes
}

// leader is the index of the node every live node names as the leader.
func leader(t *testing.T, nodes []*server) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		seen := map[string]bool{}
		for _, n := range nodes {
			if !n.running() {
				continue
			}
			seen[raftLeaderID(n)] = true
		}
		if len(seen) == 1 {
			for id := range seen {
				if n, err := strconv.Atoi(id); err == nil && n > 0 {
					return n - 1
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the nodes never agreed on a leader")
	return -1
}

func raftLeaderID(s *server) string {
	c, err := redis.Dial("tcp", s.addr, redis.DialReadTimeout(2*time.Second),
		redis.DialConnectTimeout(2*time.Second))
	if err != nil {
		return "unreachable"
	}
	defer c.Close()
	info, err := redis.String(c.Do("INFO", "replication"))
	if err != nil {
		return "error"
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "raft_leader_id:") {
			return strings.TrimPrefix(line, "raft_leader_id:")
		}
	}
	return "none"
}
