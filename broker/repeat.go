package broker

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// repeatKind names the kind of a line about what failing with err: what
// (its numbers left out, as in "write 12 answers"), and the first word of
// an error Redis answered (WRONGTYPE, ERR, ...).
func repeatKind(what string, err error) string {
	what = strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, what)
	var answered redis.Error
	if errors.As(err, &answered) {
		word, _, _ := strings.Cut(answered.Error(), " ")
		return what + "\x00" + word
	}
	return what
}
