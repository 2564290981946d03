package main

import (
	"bufio"
	"errors"
	"io"
)

// LineReader splits the child's stdout into lines (one JSON-RPC message each) with a bound on
// a line's length. A line past the bound is dropped whole: the reader reports it once (Dropped)
// and resynchronises at the next newline, so one bad write never costs the messages after it,
// and never more than maxBytes of memory.
type LineReader struct {
	r        *bufio.Reader
	maxBytes int
}

// ErrLineTooLong is returned (with the line's length so far) for a line past the bound; the
// reader has already skipped to the start of the next line.
type ErrLineTooLong struct {
	Bytes int64
}

func (e *ErrLineTooLong) Error() string {
	return "line longer than the bound"
}

func NewLineReader(r io.Reader, maxBytes int) *LineReader {
	size := 64 * 1024
	if maxBytes < size {
		size = maxBytes + 1
	}
	return &LineReader{r: bufio.NewReaderSize(r, size), maxBytes: maxBytes}
}

// Next returns the next line without its newline (and without a trailing \r). At the end of the
// stream a last line without a newline is returned, then io.EOF. A line longer than maxBytes
// yields *ErrLineTooLong (the caller logs it and calls Next again).
func (l *LineReader) Next() ([]byte, error) {
	var line []byte
	for {
		chunk, err := l.r.ReadSlice('\n')
		if len(line)+len(chunk) > l.maxBytes+1 { // +1: the newline itself is not counted
			total := int64(len(line) + len(chunk))
			if err == nil {
				return nil, &ErrLineTooLong{Bytes: total - 1}
			}
			return nil, l.skip(total, err)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			line = line[:len(line)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}

// skip discards up to and including the next newline, counting what it dropped.
func (l *LineReader) skip(total int64, err error) error {
	for errors.Is(err, bufio.ErrBufferFull) {
		var chunk []byte
		chunk, err = l.r.ReadSlice('\n')
		total += int64(len(chunk))
	}
	if err == nil {
		return &ErrLineTooLong{Bytes: total - 1}
	}
	if errors.Is(err, io.EOF) {
		// The over-long line was the last one: report it; the next call sees io.EOF.
		return &ErrLineTooLong{Bytes: total}
	}
	return err
}
