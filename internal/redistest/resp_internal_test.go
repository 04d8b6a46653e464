package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		want        string // the rendered reply; "" with wantErr
		wantErr     string // a substring of the error; "" for none
		replyErr    bool   // the error is a *ReplyError
	}{
		{name: "simple", input: "+OK\r\n", want: "OK"},
		{name: "error", input: "-NOAUTH Authentication required.\r\n", wantErr: "NOAUTH", replyErr: true},
		{name: "integer", input: ":-42\r\n", want: "-42"},
		{name: "bulk", input: "$5\r\na\r\nbc\r\n", want: "a\r\nbc"},
		{name: "empty bulk", input: "$0\r\n\r\n", want: ""},
		{name: "null bulk", input: "$-1\r\n", want: ""},
		{name: "null array", input: "*-1\r\n", want: ""},
		{name: "array", input: "*3\r\n+a\r\n:1\r\n$1\r\nb\r\n", want: "a\n1\nb"},
		{name: "nested array", input: "*2\r\n*2\r\n+a\r\n+b\r\n+c\r\n", want: "a\nb\nc"},
		{name: "error in array", input: "*2\r\n+a\r\n-ERR inside\r\n", wantErr: "ERR inside", replyErr: true},
		{name: "no CRLF", input: "+OK\n", wantErr: "CRLF"},
		{name: "empty line", input: "\r\n", wantErr: "empty"},
		{name: "unknown type", input: "%1\r\n", wantErr: "unknown reply type"},
		{name: "bad integer", input: ":12a\r\n", wantErr: "integer"},
		{name: "padded length", input: "$01\r\na\r\n", wantErr: "bad length"},
		{name: "negative length", input: "*-2\r\n", wantErr: "bad length"},
		{name: "bulk over limit", input: "$" + strconv.Itoa(maxBulkLen+1) + "\r\n", wantErr: "limit"},
		{name: "short bulk", input: "$5\r\nab\r\n", wantErr: "EOF"},
		{name: "bulk without CRLF", input: "$2\r\nabcd", wantErr: "CRLF"},
		{name: "short array", input: "*2\r\n+a\r\n", wantErr: "element 1 of 2"},
		{name: "too deep", input: strings.Repeat("*1\r\n", maxReplyDepth+1) + "+a\r\n", wantErr: "nested"},
		{name: "deep enough", input: strings.Repeat("*1\r\n", maxReplyDepth) + "+a\r\n", want: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := readReply(bufio.NewReader(strings.NewReader(tc.input)))
			var got string
			if err == nil {
				got, err = render(rep)
			}
			if tc.wantErr == "" {
				if err != nil || got != tc.want {
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %q, %v; want an error with %q", got, err, tc.wantErr)
			}
			var replyErr *ReplyError
			if errors.As(err, &replyErr) != tc.replyErr {
				t.Errorf("error %v: is a *ReplyError = %t, want %t", err, !tc.replyErr, tc.replyErr)
			}
		})
	}
}

func TestWriteCommand(t *testing.T) {
	var buf bytes.Buffer
	if err := writeCommand(&buf, []string{"SET", "k", "a\r\nb", ""}); err != nil {
		t.Fatal(err)
	}
	const want = "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n$0\r\n\r\n"
	if buf.String() != want {
		t.Errorf("writeCommand wrote %q, want %q", buf.String(), want)
	}
}

// encodeReply writes rep back in RESP, the inverse of readReply.
func encodeReply(buf []byte, rep reply) []byte {
	buf = append(buf, rep.kind)
	switch {
	case rep.null:
		return append(buf, "-1\r\n"...)
	case rep.kind == '$':
		buf = strconv.AppendInt(buf, int64(len(rep.text)), 10)
		buf = append(buf, "\r\n"...)
		buf = append(buf, rep.text...)
	case rep.kind == '*':
		buf = strconv.AppendInt(buf, int64(len(rep.elems)), 10)
		buf = append(buf, "\r\n"...)
		for _, elem := range rep.elems {
			buf = encodeReply(buf, elem)
		}
		return buf
	default:
		buf = append(buf, rep.text...)
	}
	return append(buf, "\r\n"...)
}

// FuzzReadReply holds that whatever readReply accepts it read exactly: the
// reply written back in RESP is the very bytes it consumed.
func FuzzReadReply(f *testing.F) {
	for _, seed := range []string{
		"+OK\r\n", "-ERR x\r\n", ":0\r\n", ":-9223372036854775808\r\n",
		"$3\r\nabc\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n",
		"*2\r\n$1\r\na\r\n*1\r\n:7\r\n", "$2\r\nab", "*1\r\n", "+a\rb\r\n",
		"$99999999999999999999\r\n", "*3\r\n+a\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := bytes.NewReader(data)
		r := bufio.NewReader(src)
		rep, err := readReply(r)
		if err != nil {
			return
		}
		consumed := len(data) - src.Len() - r.Buffered()
		if again := encodeReply(nil, rep); !bytes.Equal(again, data[:consumed]) {
			t.Fatalf("read %q as %+v, which writes back as %q", data[:consumed], rep, again)
		}
		_, _ = render(rep)
	})
}
