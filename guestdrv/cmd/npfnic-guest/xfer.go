package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
)

// tcpSend streams a file over one TCP connection and reports its length and
// sha256, so a test can compare both ends of a transfer through a NIC.
func tcpSend(addr, file string, out io.Writer) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	h := sha256.New()
	n, err := io.Copy(conn, io.TeeReader(f, h))
	if err != nil {
		return fmt.Errorf("send %s to %s after %d bytes: %w", file, addr, n, err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	// Wait for the receiver to close: everything sent has then arrived.
	if _, err := io.Copy(io.Discard, conn); err != nil {
		return err
	}
	fmt.Fprintf(out, "sent %d bytes sha256 %x\n", n, h.Sum(nil))
	return nil
}

// tcpRecv accepts one connection and stores what it carries in file.
func tcpRecv(addr, file string, out io.Writer) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer l.Close()
	conn, err := l.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), conn)
	if err != nil {
		return fmt.Errorf("receive into %s after %d bytes: %w", file, n, err)
	}
	fmt.Fprintf(out, "received %d bytes sha256 %x\n", n, h.Sum(nil))
	return nil
}
