package arrowexport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/compress"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/braidlabs/braid/operators/braidpb"
)

// Format of an output file.
type Format int

const (
	// FormatArrow is the Arrow IPC file format (also called Feather v2),
	// uncompressed: .arrow, .feather, .ipc.
	FormatArrow Format = iota + 1
	// FormatParquet is Parquet (format version 2.6, snappy compression):
	// .parquet.
	FormatParquet
)

// String returns "arrow" or "parquet".
func (f Format) String() string {
	switch f {
	case FormatArrow:
		return "arrow"
	case FormatParquet:
		return "parquet"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatForPath returns the format that path's extension names, ignoring
// case: .arrow, .feather and .ipc are FormatArrow, .parquet is
// FormatParquet.
func FormatForPath(path string) (Format, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".arrow", ".feather", ".ipc":
		return FormatArrow, nil
	case ".parquet":
		return FormatParquet, nil
	case "":
		return 0, fmt.Errorf("arrowexport: %s has no extension; want .arrow, .feather, .ipc or .parquet", path)
	default:
		return 0, fmt.Errorf("arrowexport: unknown extension %q of %s; want .arrow, .feather, .ipc or .parquet", ext, path)
	}
}

const (
	// BatchRows is the number of rows (FusedTraces) per Arrow record batch
	// and per Parquet row group. A batch is also cut earlier when its
	// buffered data reaches about batchBytes.
	BatchRows = 4096

	batchBytes = 64 << 20
	bufSize    = 1 << 20
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("arrowexport: writer is closed")

// Writer appends FusedTrace records and writes one file. Rows are buffered
// and written as an Arrow record batch or Parquet row group every BatchRows
// rows; Close writes the rest and the file footer, and the file is not
// readable before. Not safe for concurrent use.
//
// The same sequence of Write calls gives a byte-identical file.
type Writer struct {
	format    Format
	b         *builders
	rows      int // rows buffered in b
	batchRows int

	file *os.File // set by Create
	buf  *bufio.Writer
	out  *offsetWriter
	ipcw *ipc.FileWriter
	pqw  *pqarrow.FileWriter

	err      error // sticky write error
	closed   bool
	closeErr error
}

// Create creates (or truncates) the file at path and returns a Writer that
// writes f to it. Close closes the file. Use FormatForPath to choose f from
// the extension.
func Create(path string, f Format) (*Writer, error) {
	if err := checkFormat(f); err != nil {
		return nil, err
	}
	file, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("arrowexport: %w", err)
	}
	w, err := newWriter(file, f, memory.DefaultAllocator, BatchRows)
	if err != nil {
		file.Close()
		os.Remove(path)
		return nil, err
	}
	w.file = file
	return w, nil
}

// NewWriter returns a Writer that writes f to w. w needs no Seek: offsets
// in the file are counted from the first byte written to w. Close does not
// close w.
func NewWriter(w io.Writer, f Format) (*Writer, error) {
	return newWriter(w, f, memory.DefaultAllocator, BatchRows)
}

func checkFormat(f Format) error {
	if f != FormatArrow && f != FormatParquet {
		return fmt.Errorf("arrowexport: unknown format %d", int(f))
	}
	return nil
}

func newWriter(w io.Writer, f Format, mem memory.Allocator, batchRows int) (*Writer, error) {
	if err := checkFormat(f); err != nil {
		return nil, err
	}
	buf := bufio.NewWriterSize(w, bufSize)
	wr := &Writer{
		format:    f,
		batchRows: batchRows,
		buf:       buf,
		out:       &offsetWriter{w: buf},
	}
	var err error
	switch f {
	case FormatArrow:
		wr.ipcw, err = ipc.NewFileWriter(wr.out, ipc.WithSchema(schema), ipc.WithAllocator(mem))
	case FormatParquet:
		props := parquet.NewWriterProperties(
			parquet.WithAllocator(mem),
			parquet.WithVersion(parquet.V2_LATEST), // keeps timestamp[ns]
			// Snappy, not zstd: arrow-go v17's zstd codec builds a new
			// encoder for every page, which made writing about 4 times
			// slower (and files only 1.8 times smaller).
			parquet.WithCompression(compress.Codecs.Snappy),
			parquet.WithMaxRowGroupLength(int64(batchRows)),
			// parquet-go's default root is "repeated", which strict readers
			// reject; the Parquet specification's root is "required".
			parquet.WithRootRepetition(parquet.Repetitions.Required),
		)
		aprops := pqarrow.NewArrowWriterProperties(
			pqarrow.WithAllocator(mem),
			pqarrow.WithStoreSchema(), // ARROW:schema restores uint32, UTC etc.
		)
		wr.pqw, err = pqarrow.NewFileWriter(schema, wr.out, props, aprops)
	}
	if err != nil {
		return nil, fmt.Errorf("arrowexport: %w", err)
	}
	wr.b = newBuilders(mem)
	return wr, nil
}

// Format returns the writer's format.
func (w *Writer) Format() Format { return w.format }

// Write buffers ft as one row, and writes a record batch (Arrow) or row
// group (Parquet) when BatchRows rows are buffered. ft is not retained.
// After an error the Writer is unusable: every later Write returns the same
// error, and Close only releases resources.
func (w *Writer) Write(ft *braidpb.FusedTrace) error {
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if ft == nil {
		return errors.New("arrowexport: Write(nil)")
	}
	w.b.appendTrace(ft)
	w.rows++
	if w.rows >= w.batchRows || w.b.pending >= batchBytes {
		return w.flush()
	}
	return nil
}

// flush writes the buffered rows, if any, as one record batch / row group.
func (w *Writer) flush() error {
	if w.rows == 0 {
		return nil
	}
	rec := w.b.rb.NewRecord()
	defer rec.Release()
	w.rows, w.b.pending = 0, 0
	var err error
	switch w.format {
	case FormatArrow:
		err = w.ipcw.Write(rec)
	case FormatParquet:
		err = w.pqw.Write(rec)
	}
	if err != nil {
		w.err = fmt.Errorf("arrowexport: writing %s batch: %w", w.format, err)
		return w.err
	}
	return nil
}

// Close writes the buffered rows and the file footer, flushes, and closes
// the file if the Writer was made by Create. A file with zero rows is
// valid. Close is idempotent: later calls return the first call's result.
func (w *Writer) Close() error {
	if w.closed {
		return w.closeErr
	}
	w.closed = true
	err := w.err
	if err == nil {
		err = w.flush()
	}
	// The format writers are closed even after an error, to release their
	// memory; their errors only count if nothing failed before.
	var cerr error
	switch w.format {
	case FormatArrow:
		if err == nil {
			cerr = w.ipcw.Close()
		}
	case FormatParquet:
		cerr = w.pqw.Close()
	}
	if err == nil && cerr != nil {
		err = fmt.Errorf("arrowexport: finishing %s file: %w", w.format, cerr)
	}
	if err == nil {
		if ferr := w.buf.Flush(); ferr != nil {
			err = fmt.Errorf("arrowexport: %w", ferr)
		}
	}
	w.b.rb.Release()
	if w.file != nil {
		if ferr := w.file.Close(); ferr != nil && err == nil {
			err = fmt.Errorf("arrowexport: %w", ferr)
		}
	}
	w.closeErr = err
	return err
}

// offsetWriter counts the bytes written; its Seek only reports that count
// (the Arrow IPC file writer asks for its position, and never moves).
type offsetWriter struct {
	w   io.Writer
	off int64
}

func (o *offsetWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	o.off += int64(n)
	return n, err
}

func (o *offsetWriter) Seek(offset int64, whence int) (int64, error) {
	if offset == 0 && whence == io.SeekCurrent {
		return o.off, nil
	}
	return o.off, errors.New("arrowexport: output is not seekable")
}
