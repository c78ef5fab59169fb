package main

import (
	"bufio"
	"bytes"
	"os"
	"runtime/metrics"
	"strconv"
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
