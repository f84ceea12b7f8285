// SPDX-License-Identifier: Apache-2.0

package test

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/testutil"
)

// echoConn is one TCP connection from a guest to a line echo server on
// the host: the guest's end, and the server's, which may also write
// unasked (what only a tracked flow lets in through a stateful ACL).
type echoConn struct {
	conn, server net.Conn
	rd           *bufio.Reader
}

// dialEcho serves a line echo on addr in host and connects to it from
// guest.
func dialEcho(t *testing.T, host, guest *testutil.NetNS, addr string) *echoConn {
	t.Helper()
	var ln net.Listener
	if err := host.Do(func() (err error) { ln, err = net.Listen("tcp4", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
		s := bufio.NewScanner(c)
		for s.Scan() {
			fmt.Fprintf(c, "echo %s\n", s.Text())
		}
	}()
	e := &echoConn{}
	if err := guest.Do(func() (err error) { e.conn, err = net.DialTimeout("tcp4", addr, 3*time.Second); return err }); err != nil {
		t.Fatalf("connecting to %s: %v", addr, err)
	}
	t.Cleanup(func() { e.conn.Close() })
	if e.server = <-accepted; e.server == nil {
		t.Fatalf("%s accepted no connection", addr)
	}
	t.Cleanup(func() { e.server.Close() })
	e.rd = bufio.NewReader(e.conn)
	return e
}

// readLine reads the guest's next line within d.
func (e *echoConn) readLine(d time.Duration) (string, error) {
	_ = e.conn.SetReadDeadline(time.Now().Add(d))
	return e.rd.ReadString('\n')
}

// echo sends what from the guest and waits 3 s for its echo.
func (e *echoConn) echo(what string) error {
	if _, err := fmt.Fprintf(e.conn, "%s\n", what); err != nil {
		return err
	}
	line, err := e.readLine(3 * time.Second)
	if err == nil && line != "echo "+what+"\n" {
		err = fmt.Errorf("got %q", line)
	}
	return err
}
