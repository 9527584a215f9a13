// Command tsdbgen writes Prometheus TSDB blocks straight from series descriptions, with the tsdb library's
// BlockWriter (the one promtool's backfill uses), instead of going through OpenMetrics text: promtool 2.42
// reads its whole input into memory and re-parses it once per block, hours for a month of 10,000 GPUs.
//
// Input (stdin): one JSON object per line and series,
//
//	{"labels": {"__name__": "...", ...}, "value": 0.85, "begin": 1793577600, "end": 1796169600, "interval": 60}
//
// a constant value sampled every interval seconds from begin (inclusive) to end (exclusive), unix seconds:
// bench/report_scale.py --writer tsdbgen writes them. Output: blocks of -block length in -out.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
)

type spec struct {
	Labels   map[string]string `json:"labels"`
	Value    float64           `json:"value"`
	Begin    int64             `json:"begin"`
	End      int64             `json:"end"`
	Interval int64             `json:"interval"`
}

// slice: samples are appended an hour at a time across all series, so that the head's
// appendable window (its newest sample minus half the block) never excludes the next sample.
const slice = int64(time.Hour / time.Millisecond)

func main() {
	out := flag.String("out", "", "TSDB directory to write blocks into")
	block := flag.Duration("block", 24*time.Hour, "block length (aligned to multiples of it since the epoch)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "tsdbgen: -out DIR is required")
		os.Exit(2)
	}
	if err := run(*out, block.Milliseconds()); err != nil {
		fmt.Fprintln(os.Stderr, "tsdbgen:", err)
		os.Exit(1)
	}
}

func run(out string, blockMs int64) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var specs []spec
	var sets []labels.Labels
	minT, maxT := int64(1<<62), int64(-1<<62)
	dec := json.NewDecoder(bufio.NewReaderSize(os.Stdin, 1<<20))
	for {
		var s spec
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("series %d: %w", len(specs)+1, err)
		}
		if s.Interval <= 0 || s.End <= s.Begin {
			return fmt.Errorf("series %d: need interval > 0 and end > begin", len(specs)+1)
		}
		s.Begin, s.End, s.Interval = s.Begin*1000, s.End*1000, s.Interval*1000
		minT, maxT = min(minT, s.Begin), max(maxT, s.End)
		specs = append(specs, s)
		sets = append(sets, labels.FromMap(s.Labels))
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	var total int64
	started := time.Now()
	for lo := minT / blockMs * blockMs; lo < maxT; lo += blockMs {
		hi := lo + blockMs
		w, err := tsdb.NewBlockWriter(logger, out, blockMs)
		if err != nil {
			return err
		}
		refs := make([]storage.SeriesRef, len(specs))
		var n int64
		for from := lo; from < hi; from += slice {
			to := min(from+slice, hi)
			app := w.Appender(ctx)
			for i := range specs {
				s := &specs[i]
				t := s.Begin
				if t < from {
					t += (from - t + s.Interval - 1) / s.Interval * s.Interval
				}
				for ; t < min(s.End, to); t += s.Interval {
					if refs[i], err = app.Append(refs[i], sets[i], t, s.Value); err != nil {
						return fmt.Errorf("append %s at %d: %w", sets[i], t, err)
					}
					n++
				}
			}
			if err := app.Commit(); err != nil {
				return err
			}
		}
		if n > 0 {
			if _, err := w.Flush(ctx); err != nil {
				return err
			}
		}
		if err := w.Close(); err != nil {
			return err
		}
		total += n
		fmt.Fprintf(os.Stderr, "tsdbgen: block %s: %d samples (%d so far, %.0f s)\n",
			time.UnixMilli(lo).UTC().Format(time.RFC3339), n, total, time.Since(started).Seconds())
	}
	fmt.Printf("%d series, %d samples\n", len(specs), total)
	return nil
}
