package broker

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redis's words for the types of value streamer keeps, as TYPE answers.
const (
	typeStream = "stream"
	typeZSet   = "zset"
	typeSet    = "set"
	typeHash   = "hash"
	typeString = "string"
)

// keyType is a key of streamer's and the type of value it keeps there.
type keyType struct{ key, typ string }

// wrongTypes says, for a message, which of keys hold a value of another
// type than streamer keeps there, such as "streamer:items holds a hash,
// where streamer keeps a stream": Redis answers WRONGTYPE, naming no key,
// to a command or script on several. It is "" when none does, or Redis
// did not answer.
func wrongTypes(ctx context.Context, rdb redis.Cmdable, keys ...keyType) string {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StatusCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Type(ctx, k.key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return ""
	}
	var wrong []string
	for i, k := range keys {
		if t := cmds[i].Val(); t != k.typ && t != "none" {
			wrong = append(wrong, fmt.Sprintf("%s holds %s, where streamer keeps %s", k.key, article(t), article(k.typ)))
		}
	}
	return strings.Join(wrong, "; ")
}

// article is Redis's name of a type with "a" or "an" before it.
func article(typ string) string {
	if typ == "" {
		return "nothing"
	}
	if strings.ContainsRune("aeiou", rune(typ[0])) {
		return "an " + typ
	}
	return "a " + typ
}

// mendScript replaces a key of streamer's that holds another type than
// streamer keeps there (written by hand, or by another program) with an
// empty one: it deletes it, and makes a stream with its group anew when
// one is named. It answers the type it found; and when it replaced the
// key, what the key held, for the log (its size and a few of its values,
// each cut short), as what it held is lost. In one script, so that a key
// that another client makes right meanwhile is not deleted. The commands
// that describe what it held may be refused (a user without @list), and
// the description is then the type alone.
//
//	KEYS[1] the key
//	ARGV    the type streamer keeps there, and the group to make on the
//	        stream made anew ("" for none)
var mendScript = redis.NewScript(`
local found = redis.call('TYPE', KEYS[1])['ok']
if found == ARGV[1] or found == 'none' then return {found} end
local function try(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then return nil end
  return r
end
local key, size, values = KEYS[1], nil, nil
if found == 'string' then
  size = try('STRLEN', key)
  local head = try('GETRANGE', key, 0, 63)
  if head then values = {head} end
elseif found == 'hash' then
  size = try('HLEN', key)
  local page = try('HSCAN', key, 0, 'COUNT', 8)
  if page then values = page[2] end
elseif found == 'set' then
  size = try('SCARD', key)
  local page = try('SSCAN', key, 0, 'COUNT', 8)
  if page then values = page[2] end
elseif found == 'zset' then
  size = try('ZCARD', key)
  values = try('ZRANGE', key, 0, 3, 'WITHSCORES')
elseif found == 'list' then
  size = try('LLEN', key)
  values = try('LRANGE', key, 0, 7)
elseif found == 'stream' then
  size = try('XLEN', key)
end
local shown = {}
for i = 1, math.min(#(values or {}), 8) do shown[i] = string.sub(tostring(values[i]), 1, 64) end
redis.call('DEL', key)
if ARGV[2] ~= '' then redis.call('XGROUP', 'CREATE', key, ARGV[2], '0', 'MKSTREAM') end
return {found, size or -1, shown}
`)

// mended is what mendScript found on a key, and replaced when its type
// was not typ.
type mended struct {
	found  string   // the type found ("none" when there was no key)
	size   int64    // its size (bytes, fields, members, elements), or -1
	values []string // a few of its values, cut short
}

// replaced says whether the key was replaced.
func (m mended) replaced(typ string) bool { return m.found != typ && m.found != "none" }

// String describes what the key held, as `a hash of 1 field: "zz" "b"`.
func (m mended) String() string {
	s := article(m.found)
	if m.size >= 0 {
		units := map[string][2]string{
			typeString: {"byte", "bytes"}, typeHash: {"field", "fields"}, typeSet: {"member", "members"},
			typeZSet: {"member", "members"}, "list": {"element", "elements"}, typeStream: {"entry", "entries"},
		}[m.found]
		if units[0] == "" {
			units = [2]string{"value", "values"}
		}
		unit := units[1]
		if m.size == 1 {
			unit = units[0]
		}
		s += " of " + strconv.FormatInt(m.size, 10) + " " + unit
	}
	if len(m.values) > 0 {
		quoted := make([]string, len(m.values))
		for i, v := range m.values {
			quoted[i] = strconv.Quote(v)
		}
		s += ": " + strings.Join(quoted, " ")
		shown := int64(len(m.values))
		if m.found == typeHash || m.found == typeZSet {
			shown /= 2 // field and value, member and score
		}
		if m.found == typeString {
			shown = int64(len(m.values[0]))
		}
		if m.size > shown {
			s += " …"
		}
	}
	return s
}

// mend runs mendScript on key, which should hold typ (a stream made
// anew with group, when group is not empty).
func mend(ctx context.Context, rdb redis.Scripter, key, typ, group string) (mended, error) {
	res, err := mendScript.Run(ctx, rdb, []string{key}, typ, group).Slice()
	if err != nil {
		return mended{}, err
	}
	m := mended{size: -1}
	if len(res) > 0 {
		m.found, _ = res[0].(string)
	}
	if len(res) > 1 {
		if size, ok := res[1].(int64); ok {
			m.size = size
		}
	}
	if len(res) > 2 {
		values, _ := res[2].([]any)
		for _, v := range values {
			s, _ := v.(string)
			m.values = append(m.values, s)
		}
	}
	return m, nil
}
