package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"github.com/tally-dev/tally/storage"
)

// memSample is one reading of this process's memory.
type memSample struct {
	At time.Duration // since sampling started
	// RSS is the resident set size from /proc/self/status (-1 where there
	// is none). It includes memory Go does not manage, such as Pebble's
	// block cache and memtables, which Pebble allocates outside the Go heap.
	RSS int64
	// GoTotal is all memory the Go runtime has mapped
	// (/memory/classes/total:bytes).
	GoTotal int64
	// HeapObjects is the heap occupied by objects, live or not yet swept
	// (/memory/classes/heap/objects:bytes).
	HeapObjects int64
	// HeapLive is the heap marked live by the last GC
	// (/gc/heap/live:bytes): what a leak makes grow.
	HeapLive   int64
	Goroutines int64
	// BlockCache and MemTables are the in-process replica's Pebble block
	// cache and memtables (part of RSS, outside the Go heap); -1 when the
	// replica is elsewhere.
	BlockCache, MemTables int64
	// Tables is the replica's sstable bytes on disk (-1: unknown).
	Tables int64
}

var memMetricNames = []string{
	"/memory/classes/total:bytes",
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/live:bytes",
	"/sched/goroutines:goroutines",
}

func readMemSample(store func() (storage.MemoryUse, error)) memSample {
	ms := make([]metrics.Sample, len(memMetricNames))
	for i, n := range memMetricNames {
		ms[i].Name = n
	}
	metrics.Read(ms)
	val := func(i int) int64 {
		if ms[i].Value.Kind() != metrics.KindUint64 {
			return -1
		}
		return int64(ms[i].Value.Uint64())
	}
	m := memSample{
		RSS:         readRSS(),
		GoTotal:     val(0),
		HeapObjects: val(1),
		HeapLive:    val(2),
		Goroutines:  val(3),
		BlockCache:  -1,
		MemTables:   -1,
		Tables:      -1,
	}
	if store != nil {
		if u, err := store(); err == nil {
			m.BlockCache, m.MemTables, m.Tables = u.BlockCache, u.MemTables, u.Tables
		}
	}
	return m
}

// readRSS returns VmRSS from /proc/self/status in bytes, or -1.
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest) // "12345", "kB"
		if len(f) != 2 || string(f[1]) != "kB" {
			return -1
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return -1
		}
		return kb << 10
	}
	return -1
}

// memSampler prints this process's memory every interval.
type memSampler struct {
	done    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex // protects samples
	samples []memSample
}

// startMemSampler samples until stop; store, if not nil, is the in-process
// replica's store, whose Pebble memory is part of RSS.
func startMemSampler(ctx context.Context, every time.Duration, store func() (storage.MemoryUse, error), out io.Writer) *memSampler {
	s := &memSampler{done: make(chan struct{})}
	start := time.Now()
	const row = "mem %8v %10v %10v %10v %10v %12v %10v %10v %10v\n"
	fmt.Fprintf(out, row, "t", "rss", "go-total", "go-heap", "heap-live", "pebble-cache", "memtables", "goroutines", "sstables")
	take := func() {
		m := readMemSample(store)
		m.At = time.Since(start)
		s.mu.Lock()
		s.samples = append(s.samples, m)
		s.mu.Unlock()
		fmt.Fprintf(out, row, m.At.Round(time.Second), mib(m.RSS), mib(m.GoTotal), mib(m.HeapObjects), mib(m.HeapLive),
			mib(m.BlockCache), mib(m.MemTables), m.Goroutines, mib(m.Tables))
	}
	take()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.done:
				take()
				return
			case <-t.C:
				take()
			}
		}
	}()
	return s
}

func (s *memSampler) stop() {
	close(s.done)
	s.wg.Wait()
}

// summary prints, per series, the first sample, then the range after the
// warm-up (the first fifth of the run: caches and memtables filling) and
// the change over the second half (flat memory shows ~0 there).
func (s *memSampler) summary(out io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return
	}
	type series struct {
		name string
		get  func(memSample) int64
	}
	end := s.samples[len(s.samples)-1].At
	steady := s.samples
	for len(steady) > 1 && steady[0].At < end/5 {
		steady = steady[1:]
	}
	fmt.Fprintf(out, "memory over %d samples; after warm-up = from %s to %s:\n", len(s.samples),
		steady[0].At.Round(time.Second), end.Round(time.Second))
	for _, sr := range []series{
		{"rss", func(m memSample) int64 { return m.RSS }},
		{"go-total", func(m memSample) int64 { return m.GoTotal }},
		{"heap-live", func(m memSample) int64 { return m.HeapLive }},
		{"pebble-cache", func(m memSample) int64 { return m.BlockCache }},
	} {
		first, last := sr.get(s.samples[0]), sr.get(s.samples[len(s.samples)-1])
		lo, hi := sr.get(steady[0]), sr.get(steady[0])
		for _, m := range steady {
			lo, hi = min(lo, sr.get(m)), max(hi, sr.get(m))
		}
		mid := sr.get(s.samples[len(s.samples)/2])
		fmt.Fprintf(out, "  %-12s at start %s; after warm-up min %s, max %s; last %s; second half %+.1f MiB\n",
			sr.name, mib(first), mib(lo), mib(hi), mib(last), float64(last-mid)/(1<<20))
	}
}

func mib(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + "MiB"
}
