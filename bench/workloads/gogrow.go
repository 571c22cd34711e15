// Go benchmark workload, with the protocol of harness.h: gogrow N [WARMUP]
// prints "ready PID", waits for one byte on stdin, makes WARMUP + N calls
// of main.traced (timing the last N) and prints
// "calls TOTAL ns_per_call X.XXX".
//
// Each call runs on a new goroutine, whose 8 KiB stack grows (is copied to
// a bigger one) while main.traced is open: the Go runtime then walks the
// frames, and a uretprobe's return address in one kills the program.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

//go:noinline
func deep(n int) int {
	var pad [256]int64
	pad[n%256] = int64(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[(n*7)%256]&1)
}

//go:noinline
func traced(i int) int {
	return deep(8 + i%4)
}

func call(i int, done chan int) {
	go func() { done <- traced(i) }()
	<-done
}

func main() {
	n, warm := 100000, 1000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	if len(os.Args) > 2 {
		warm, _ = strconv.Atoi(os.Args[2])
	}
	fmt.Printf("ready %d\n", os.Getpid())
	var b [1]byte
	if k, _ := os.Stdin.Read(b[:]); k != 1 {
		os.Exit(3)
	}
	done := make(chan int)
	for i := 0; i < warm; i++ {
		call(i, done)
	}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		call(i, done)
	}
	ns := float64(time.Since(t0).Nanoseconds()) / float64(n)
	fmt.Printf("calls %d ns_per_call %.3f\n", warm+n, ns)
}
