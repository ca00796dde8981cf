package mcpserve_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkInitializeCostAlternating spawns the native go-sdk stdio server
// (testdata/nativeecho) and `toolhost mcp` in turn, as BenchmarkInitializeAlternating
// does, but writes initialize itself and, the moment the result line arrives, reads
// what the server has spent so far from /proc: its minor page faults and the on-CPU
// time of all its threads (schedstat). These depend far less on the machine's other
// load than the wall time does; on this project's VM each page fault costs tens of
// microseconds, so the faults say most of what a process's start costs. It
// reports the medians and the ratios of toolhost to native.
func BenchmarkInitializeCostAlternating(b *testing.B) {
	for _, bc := range initializeCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			native := buildNative(b)
			bin := toolhostBin(b)
			ws := initializeWorkspace(b, bc.cfg)
			data := b.TempDir()
			var nf, tf, nc, tc []float64
			for b.Loop() {
				f, c := startCost(b, exec.Command(native))
				nf, nc = append(nf, f), append(nc, c)
				cmd := exec.Command(bin, "mcp", "--location", ws)
				cmd.Env = append(os.Environ(), "TOOLHOST_BUILD_CACHE="+b.TempDir(), "XDG_DATA_HOME="+data)
				f, c = startCost(b, cmd)
				tf, tc = append(tf, f), append(tc, c)
			}
			med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
			b.ReportMetric(med(nf), "native-faults")
			b.ReportMetric(med(tf), "toolhost-faults")
			b.ReportMetric(med(tf)/med(nf), "faults-ratio")
			b.ReportMetric(med(nc), "native-cpu-ns")
			b.ReportMetric(med(tc), "toolhost-cpu-ns")
			b.ReportMetric(med(tc)/med(nc), "cpu-ratio")
		})
	}
}

// startCost starts cmd, writes an initialize request on its stdin and, when the
// answer arrives, returns the process's minor page faults and CPU time (ns) so far;
// then it closes stdin and waits for the process to end.
func startCost(b *testing.B, cmd *exec.Cmd) (faults, cpu float64) {
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		in.Close()
		cmd.Wait()
	}()
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}` + "\n"
	if _, err := in.Write([]byte(initialize)); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, `"result"`) {
		b.Fatalf("initialize: %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // from field 3, state
	minflt, err := strconv.ParseFloat(fields[7], 64)              // field 10
	if err != nil {
		b.Fatal(err)
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var onCPU time.Duration
	for _, t := range tasks {
		if data, err := os.ReadFile(t); err == nil {
			ns, _ := strconv.ParseInt(strings.Fields(string(data))[0], 10, 64)
			onCPU += time.Duration(ns)
		}
	}
	return minflt, float64(onCPU.Nanoseconds())
}
