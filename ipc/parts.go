package ipc

import (
	"fmt"
	"slices"
)

// itemOverhead bounds what msgpack adds to an item or an error text: a bin
// or str header takes at most five bytes.
const itemOverhead = 5

// partOverhead bounds the bytes of a result message besides its items, its
// item errors, its Error and its Expired list: the array and its headers,
// the kind, the batch id and the empty fields.
const partOverhead = 64

// ResultParts splits res, a KindResult too large for one frame of maxFrame
// bytes (DefaultMaxFrame when maxFrame <= 0), into messages that each fit:
// KindResultPart messages with the outputs of successive runs of items,
// then a KindResult with the rest and res's Error. Each carries the part
// of res's Expired list that falls in its run, counted from its run's
// first item. A
// worker writes them in order; the supervisor joins them into one answer.
// Together the outputs of a batch may exceed the limit, as long as each
// fits alone: an item whose output cannot fit in any frame fails alone,
// with an error naming the limit, and the others are answered. res is not
// changed.
func ResultParts(res *Message, maxFrame int) []*Message {
	limit := FrameLimit(maxFrame)
	fixed := partOverhead + len(res.Error) + itemOverhead*(1+len(res.Expired))
	items, itemErrs := res.Items, res.ItemErrors
	copied := false // items and itemErrs are copies, not res's own
	for i := range items {
		if fixed+itemSize(items, itemErrs, i) <= limit {
			continue
		}
		if !copied {
			items, itemErrs, copied = slices.Clone(items), slices.Clone(itemErrs), true
			if itemErrs == nil {
				itemErrs = make([]string, len(items))
			}
		}
		itemErrs[i] = fmt.Sprintf("%v: its output of %d bytes does not fit in a frame of the worker pipe, whose limit is %d bytes", ErrFrameTooLarge, len(items[i]), limit)
		items[i] = nil
	}
	var parts []*Message
	expired := res.Expired
	cut := func(kind Kind, from, to int) {
		m := &Message{Kind: kind, BatchID: res.BatchID, Items: items[from:to], ItemErrors: partOf(itemErrs, from, to)}
		// Each part's Expired counts from its own first item, so that
		// every frame is whole by itself (the Reader checks it).
		for len(expired) > 0 && expired[0] < to {
			m.Expired = append(m.Expired, expired[0]-from)
			expired = expired[1:]
		}
		parts = append(parts, m)
	}
	start, size := 0, fixed
	for i := range items {
		n := itemSize(items, itemErrs, i)
		if size+n > limit && i > start {
			cut(KindResultPart, start, i)
			start, size = i, fixed
		}
		size += n
	}
	cut(KindResult, start, len(items))
	parts[len(parts)-1].Error = res.Error
	return parts
}

// itemSize bounds the encoded size of item i of a result: its output and
// its error text, if the result has any, with their headers.
func itemSize(items [][]byte, itemErrs []string, i int) int {
	n := len(items[i]) + itemOverhead
	if itemErrs != nil {
		n += len(itemErrs[i]) + itemOverhead
	}
	return n
}

// partOf is itemErrs[from:to], or nil when the result has no item errors.
func partOf(itemErrs []string, from, to int) []string {
	if itemErrs == nil {
		return nil
	}
	return itemErrs[from:to]
}
