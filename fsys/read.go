package fsys

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// sniffLen is how much of a file decides whether it is binary.
const sniffLen = 8000

// IsBinary reports whether data, the start of a file, looks binary: it contains a
// NUL byte within its first 8000 bytes (the test git and grep use).
func IsBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), sniffLen)], 0) >= 0
}

// open resolves p and opens it beneath the root as a regular file, failing with
// ErrIsDir or ErrNotRegular otherwise.
func (f *FS) open(op, p string) (*os.File, os.FileInfo, error) {
	abs, err := f.Resolve(p)
	if err != nil {
		return nil, nil, err
	}
	file, fi, err := f.openBeneath(abs)
	if err != nil {
		return nil, nil, &PathError{Op: op, Path: p, Err: err}
	}
	if err := regular(fi); err != nil {
		file.Close()
		return nil, nil, &PathError{Op: op, Path: p, Err: err}
	}
	return file, fi, nil
}

// regular returns nil for a regular file, else ErrIsDir or ErrNotRegular.
func regular(fi os.FileInfo) error {
	switch {
	case fi.IsDir():
		return ErrIsDir
	case !fi.Mode().IsRegular():
		return ErrNotRegular
	}
	return nil
}

// Read returns limit bytes of the file p from offset (limit 0: to the end). Reading
// more than the FS's MaxReadBytes fails with ErrTooLarge; an offset past the end
// returns no bytes. It checks ctx between chunks and returns context.Cause(ctx) when
// it ends.
func (f *FS) Read(ctx context.Context, p string, offset, limit int64) ([]byte, error) {
	if offset < 0 || limit < 0 {
		return nil, &PathError{Op: "read", Path: p, Err: fmt.Errorf("%w: negative offset or limit", ErrInvalidPath)}
	}
	file, fi, err := f.open("read", p)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	n := max(fi.Size()-offset, 0)
	if limit > 0 {
		n = min(n, limit)
	}
	if n > f.maxRead || limit > f.maxRead {
		return nil, &PathError{Op: "read", Path: p, Err: fmt.Errorf("%w: %d bytes exceed the %d byte limit", ErrTooLarge, max(n, limit), f.maxRead)}
	}
	// Read straight into the result, a chunk at a time so that ctx is checked
	// between chunks; the file may shrink meanwhile (a short result) but never
	// grows the result beyond n.
	buf := make([]byte, n)
	r := io.NewSectionReader(file, offset, n)
	got := 0
	for got < len(buf) {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		m, err := r.Read(buf[got:min(got+readChunk, len(buf))])
		got += m
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &PathError{Op: "read", Path: p, Err: err}
		}
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return buf[:got], nil
}

// readChunk is how much Read reads between checks of its context.
const readChunk = 1 << 20

// ReadLines returns up to maxLines lines of the text file p starting at line
// startLine (1-based; below 1 means 1; maxLines 0: all), without their line
// endings, and the file's total number of lines (a last line without a newline
// counts). A binary file (see IsBinary) fails with ErrBinary; a file larger than
// MaxReadBytes with ErrTooLarge. It returns context.Cause(ctx) when ctx ends.
func (f *FS) ReadLines(ctx context.Context, p string, startLine, maxLines int) (lines []string, total int, err error) {
	file, fi, err := f.open("read", p)
	if err != nil {
		return nil, 0, err
	}
	defer file.Close()
	if fi.Size() > f.maxRead {
		return nil, 0, &PathError{Op: "read", Path: p, Err: fmt.Errorf("%w: %d bytes exceed the %d byte limit", ErrTooLarge, fi.Size(), f.maxRead)}
	}
	startLine = max(startLine, 1)
	// A buffer for the file as it is now (it may grow), not 64 KiB for every small
	// file: the sniff needs sniffLen, and longer lines grow past the buffer anyway.
	br := bufio.NewReaderSize(io.LimitReader(file, f.maxRead), int(min(max(fi.Size()+1, sniffLen), 64<<10)))
	if head, _ := br.Peek(sniffLen); IsBinary(head) {
		return nil, 0, &PathError{Op: "read", Path: p, Err: ErrBinary}
	}
	var line []byte
	for {
		if total%4096 == 0 && ctx.Err() != nil {
			return nil, 0, context.Cause(ctx)
		}
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(line) > 0 {
			total++
			if total >= startLine && (maxLines <= 0 || len(lines) < maxLines) {
				lines = append(lines, string(trimEOL(line)))
			}
		}
		line = line[:0]
		if errors.Is(err, io.EOF) {
			return lines, total, nil
		}
		if err != nil {
			return nil, 0, &PathError{Op: "read", Path: p, Err: err}
		}
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
