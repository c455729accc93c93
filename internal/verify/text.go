package verify

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText prints a human summary: a verdict line, one line per partition
// and isolation level, then the kept mismatches with their offsets.
func (r Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	if r.OK() {
		ew.printf("topic %s: OK, %d partition comparisons, no mismatches\n", r.Topic, len(r.Partitions))
	} else {
		ew.printf("topic %s: %d mismatches (first %d shown below)\n", r.Topic, r.TotalMismatches, len(r.Mismatches))
	}

	superseded := false
	for _, p := range r.Partitions {
		superseded = superseded || p.Superseded > 0
	}
	if len(r.Partitions) > 0 {
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		header := "ISOLATION\tPARTITION\tRANGE\tCOMPARED\tVISIBLE SRC/DST\tLOG START SRC/DST\tEND SRC/DST\tMISMATCHES"
		if superseded {
			header += "\tSUPERSEDED"
		}
		fmt.Fprintln(tw, header)
		for _, p := range r.Partitions {
			fmt.Fprintf(tw, "%s\t%d\t[%d, %d)\t%d\t%d/%d\t%d/%d\t%d/%d\t%d",
				p.Isolation, p.Partition, p.From, p.To, p.Compared,
				p.SourceVisible, p.DestinationVisible,
				p.Source.LogStart, p.Destination.LogStart,
				p.Source.End(p.Isolation), p.Destination.End(p.Isolation),
				p.Mismatches)
			if superseded {
				fmt.Fprintf(tw, "\t%d", p.Superseded)
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil && ew.err == nil {
			ew.err = err
		}
	}

	for _, m := range r.Mismatches {
		where := fmt.Sprintf("partition %d offset %d", m.Partition, m.Offset)
		if m.Kind == KindPartition {
			where = fmt.Sprintf("partition %d", m.Partition)
		}
		iso := string(m.Isolation)
		if iso == "" {
			iso = "all levels"
		}
		ew.printf("%s (%s): %s: %s\n    source:      %s\n    destination: %s\n",
			where, iso, m.Kind, mismatchTitle(m.Kind), m.Source, m.Destination)
	}
	return ew.err
}

// mismatchTitle says in words what a kind means, so the text report reads
// without this package's documentation at hand.
func mismatchTitle(k Kind) string {
	switch k {
	case KindMissing:
		return "visible on the source, not on the destination"
	case KindExtra:
		return "visible on the destination, not on the source"
	case KindShift:
		return "records moved to other offsets"
	case KindLogStart:
		return "the logs start at different offsets"
	case KindEnd:
		return "one log ends before the other"
	case KindPartition:
		return "the partition exists on one side only"
	default:
		return "the records differ"
	}
}

// errWriter keeps the first write error so that the report code reads as a
// sequence of prints.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) {
	fmt.Fprintf(e, format, args...)
}
