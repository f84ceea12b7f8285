// SPDX-License-Identifier: Apache-2.0

package bolt

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// childEnv switches the test binary into the writer loop of
// TestKillDuringWrites; its value is the database path.
const childEnv = "PIVIRT_BOLT_KILL_WRITER"

const (
	killAfterAcks = 3000             // acknowledged writes before SIGKILL
	writerWorkers = 8                // concurrent Updates in the child
	writerMax     = 200000           // the child stops on its own after this many
	writerTimeout = 60 * time.Second // ... or after this long
	ackTimeout    = 60 * time.Second // the parent gives up waiting for acks
)

// payload is what the object called name must hold; a torn write would
// not match it.
func payload(name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"name":%q,"fill":%q}`, name, strings.Repeat(name, 20)))
}

// runWriter creates objects one Update at a time from several goroutines
// and prints "ack NAME" only after Update returned success.
func runWriter(path string) {
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer: opening:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), writerTimeout)
	defer cancel()
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = bufio.NewWriter(os.Stdout)
	)
	for w := range writerWorkers {
		wg.Go(func() {
			for i := w; i < writerMax && ctx.Err() == nil; i += writerWorkers {
				name := fmt.Sprintf("obj-%06d", i)
				_, err := s.Update(ctx, func(tx store.Tx) error {
					return tx.Create(&pivirtv1.Object{
						APIVersion: pivirtv1.APIVersion,
						Kind:       "DHCPLease",
						Metadata:   pivirtv1.ObjectMeta{Name: name, Labels: map[string]string{"worker": fmt.Sprint(w)}},
						Spec:       payload(name),
					})
				})
				if err != nil {
					return
				}
				mu.Lock()
				fmt.Fprintln(out, "ack", name)
				err = out.Flush() // the ack leaves the process before the next write
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	_ = s.Close()
}

// TestKillDuringWrites SIGKILLs a process in the middle of thousands of
// concurrent Updates and checks that every acknowledged object survived
// intact and that nothing half-written exists.
func TestKillDuringWrites(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		runWriter(path)
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("spawns a writer process")
	}
	path := filepath.Join(t.TempDir(), "state.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringWrites$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	acked := map[string]bool{}
	record := func(line string) {
		if name, ok := strings.CutPrefix(line, "ack "); ok {
			acked[name] = true
		}
	}
	deadline := time.After(ackTimeout)
	for len(acked) < killAfterAcks {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("writer exited after %d acks: %s", len(acked), stderr.String())
			}
			record(line)
		case <-deadline:
			t.Fatalf("only %d acks within %v", len(acked), ackTimeout)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("killing writer %d: %v", cmd.Process.Pid, err)
	}
	// Acks already in the pipe were printed after their Update returned.
	for line := range lines {
		record(line)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer was not killed mid-run: %v", err)
	}
	t.Logf("writer killed after %d acknowledged creates", len(acked))

	checkBoltConsistent(t, path)

	s := open(t, path, Options{})
	all, rev, err := s.List(t.Context(), "", nil)
	if err != nil {
		t.Fatalf("List after the kill: %v", err)
	}
	seenRV := map[string]string{}
	for _, o := range all {
		name := o.Metadata.Name
		if string(o.Spec) != string(payload(name)) {
			t.Errorf("%s holds spec %.60s..., want its full payload", name, o.Spec)
		}
		if v, err := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64); err != nil || v < 1 || v > rev {
			t.Errorf("%s has resourceVersion %q beyond the store revision %d", name, o.Metadata.ResourceVersion, rev)
		}
		if other, dup := seenRV[o.Metadata.ResourceVersion]; dup {
			t.Errorf("%s and %s share resourceVersion %s", name, other, o.Metadata.ResourceVersion)
		}
		seenRV[o.Metadata.ResourceVersion] = name
		delete(acked, name)
	}
	if len(acked) > 0 {
		t.Errorf("%d acknowledged objects lost, e.g. %v", len(acked), firstKeys(acked, 5))
	}
	if len(all) < killAfterAcks {
		t.Errorf("only %d objects stored, want at least the %d acknowledged", len(all), killAfterAcks)
	}
	if rev != int64(len(all)) {
		t.Errorf("store revision %d after %d single-object creates", rev, len(all))
	}
}

// checkBoltConsistent runs bbolt's own page-level consistency check.
func checkBoltConsistent(t *testing.T, path string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatalf("opening the killed database: %v", err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("bbolt consistency check: %v", err)
	}
}

func firstKeys(m map[string]bool, n int) []string {
	var out []string
	for k := range m {
		if len(out) == n {
			break
		}
		out = append(out, k)
	}
	return out
}
