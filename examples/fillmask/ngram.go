package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strings"
)

// maxOrder is the longest n-gram the model counts.
const maxOrder = 4

// Special tokens. They cannot come out of the tokenizer, which yields only
// lower-case words, punctuation and the mask.
const (
	sentenceStart = "<s>"
	sentenceEnd   = "</s>"
	unknownWord   = "<unk>"
	maskToken     = "[mask]"
)

// tokenPattern splits lower-cased text into the mask, words (letters and
// digits, with an inner apostrophe: "don't") and punctuation.
var tokenPattern = regexp.MustCompile(`\[mask\]|[\p{L}\p{N}]+(?:'[\p{L}]+)?|[.,!?;:]`)

// tokenize lower-cases text and splits it into tokens.
func tokenize(text string) []string {
	return tokenPattern.FindAllString(strings.ToLower(text), -1)
}

// gram is an n-gram of token ids, padded with -1 after its n tokens.
type gram [maxOrder]int32

// NGram is an interpolated Kneser-Ney language model: the probability of a
// word after a context mixes how often that word followed the context in the
// corpus (less a discount) with the lower-order estimate, down to a uniform
// distribution over the vocabulary. Lower orders count in how many distinct
// contexts a word appears rather than how often, so that "francisco" (seen a
// lot, but only after "san") is not a likely word anywhere else.
type NGram struct {
	order int
	ids   map[string]int32
	words []string

	// By order n (index n-1): the n-grams' counts (raw at the highest order,
	// continuation counts below), and per context of n-1 tokens the sum of
	// its n-grams' counts and how many distinct words follow it.
	counts   []map[gram]float64
	ctxTotal []map[gram]float64
	ctxTypes []map[gram]float64
	discount []float64

	candidates []int32 // the ids that may fill a mask: words, no punctuation
}

// Train builds a model of the given order (2 to 4) from a corpus: plain text
// whose sentences end with '.', '!' or '?'. Lines starting with '#' are
// comments.
func Train(corpus io.Reader, order int) (*NGram, error) {
	if order < 2 || order > maxOrder {
		return nil, fmt.Errorf("order %d: want 2 to %d", order, maxOrder)
	}
	m := &NGram{order: order, ids: map[string]int32{}}
	for _, w := range []string{unknownWord, sentenceStart, sentenceEnd} {
		m.id(w)
	}
	sentences, err := m.readSentences(corpus)
	if err != nil {
		return nil, err
	}
	if len(sentences) == 0 {
		return nil, errors.New("the corpus has no sentences")
	}
	m.count(sentences)
	for id, w := range m.words {
		if isWord(w) {
			m.candidates = append(m.candidates, int32(id))
		}
	}
	return m, nil
}

func isWord(token string) bool {
	return tokenPattern.MatchString(token) && !strings.ContainsAny(token, ".,!?;:[")
}

// id returns the id of word, adding it to the vocabulary.
func (m *NGram) id(word string) int32 {
	if id, ok := m.ids[word]; ok {
		return id
	}
	id := int32(len(m.words))
	m.ids[word] = id
	m.words = append(m.words, word)
	return id
}

// readSentences tokenizes the corpus into sentences of ids, each padded with
// order-1 sentence starts and one sentence end.
func (m *NGram) readSentences(corpus io.Reader) ([][]int32, error) {
	var sentences [][]int32
	current := m.newSentence()
	scanner := bufio.NewScanner(corpus)
	scanner.Buffer(make([]byte, 64<<10), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, tok := range tokenize(line) {
			if tok == maskToken {
				continue
			}
			current = append(current, m.id(tok))
			if tok == "." || tok == "!" || tok == "?" {
				sentences = append(sentences, append(current, m.ids[sentenceEnd]))
				current = m.newSentence()
			}
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("read corpus: %w", err)
	}
	if len(current) > m.order-1 {
		sentences = append(sentences, append(current, m.ids[sentenceEnd]))
	}
	return sentences, nil
}

func (m *NGram) newSentence() []int32 {
	s := make([]int32, m.order-1, 32)
	for i := range s {
		s[i] = m.ids[sentenceStart]
	}
	return s
}

// count fills the tables: raw counts at the highest order, continuation
// counts (distinct left neighbours) below it, then the context sums and the
// discounts.
func (m *NGram) count(sentences [][]int32) {
	m.counts = make([]map[gram]float64, m.order)
	m.ctxTotal = make([]map[gram]float64, m.order)
	m.ctxTypes = make([]map[gram]float64, m.order)
	m.discount = make([]float64, m.order)
	for n := range m.order {
		m.counts[n] = map[gram]float64{}
		m.ctxTotal[n] = map[gram]float64{}
		m.ctxTypes[n] = map[gram]float64{}
	}
	top := m.counts[m.order-1]
	for _, s := range sentences {
		for end := m.order; end <= len(s); end++ {
			top[makeGram(s[end-m.order:end])]++
		}
	}
	// Each distinct n-gram (v, g...) gives the (n-1)-gram g one more
	// distinct left neighbour.
	for n := m.order; n >= 2; n-- {
		for g := range m.counts[n-1] {
			m.counts[n-2][makeGram(g[1:n])]++
		}
	}
	for n := 1; n <= m.order; n++ {
		var once, twice float64
		for g, c := range m.counts[n-1] {
			ctx := makeGram(g[:n-1])
			m.ctxTotal[n-1][ctx] += c
			m.ctxTypes[n-1][ctx]++
			switch c {
			case 1:
				once++
			case 2:
				twice++
			}
		}
		m.discount[n-1] = 0.75
		if once > 0 && twice > 0 {
			m.discount[n-1] = min(max(once/(once+2*twice), 0.1), 0.9)
		}
	}
}

// makeGram pads ids into a gram.
func makeGram(ids []int32) gram {
	g := gram{-1, -1, -1, -1}
	copy(g[:], ids)
	return g
}

// prob is the interpolated Kneser-Ney probability of word after context,
// whose length sets the order (at most order-1 tokens).
func (m *NGram) prob(context []int32, word int32) float64 {
	p := 1 / float64(len(m.words))
	for start := len(context); start >= 0; start-- {
		ctx := context[start:]
		n := len(ctx) + 1
		ctxKey := makeGram(ctx)
		total := m.ctxTotal[n-1][ctxKey]
		if total == 0 {
			continue // unseen context: the lower order stands alone
		}
		key := ctxKey
		key[len(ctx)] = word
		d := m.discount[n-1]
		p = (max(m.counts[n-1][key]-d, 0) + d*m.ctxTypes[n-1][ctxKey]*p) / total
	}
	return p
}

// Guess is a word that could fill the mask, with the log probability of the
// n-grams that hold the mask once it is filled: the part of the sentence's
// log probability that depends on the word.
type Guess struct {
	Word    string  `msgpack:"word"`
	LogProb float64 `msgpack:"logprob"`
}

// Fill finds the words that best fill the one [MASK] in text: each word of
// the vocabulary is put in its place and the sentence scored; only the
// n-grams that overlap the mask differ between words, so only they are
// summed. It returns the top k, best first.
func (m *NGram) Fill(text string, k int) ([]Guess, error) {
	toks := tokenize(text)
	sentence := m.newSentence()
	mask := -1
	for _, tok := range toks {
		if tok == maskToken {
			if mask >= 0 {
				return nil, errors.New("more than one [MASK]: fill one at a time")
			}
			mask = len(sentence)
			sentence = append(sentence, -1)
			continue
		}
		id, ok := m.ids[tok]
		if !ok {
			id = m.ids[unknownWord]
		}
		sentence = append(sentence, id)
	}
	if mask < 0 {
		return nil, errors.New("no [MASK] in the text")
	}
	if last := toks[len(toks)-1]; last == "." || last == "!" || last == "?" {
		sentence = append(sentence, m.ids[sentenceEnd])
	}
	last := min(mask+m.order-1, len(sentence)-1)

	guesses := make([]Guess, 0, len(m.candidates))
	for _, cand := range m.candidates {
		sentence[mask] = cand
		var logProb float64
		for i := mask; i <= last; i++ {
			logProb += math.Log(m.prob(sentence[i-m.order+1:i], sentence[i]))
		}
		guesses = append(guesses, Guess{Word: m.words[cand], LogProb: logProb})
	}
	sort.Slice(guesses, func(i, j int) bool {
		if guesses[i].LogProb != guesses[j].LogProb {
			return guesses[i].LogProb > guesses[j].LogProb
		}
		return guesses[i].Word < guesses[j].Word
	})
	return guesses[:min(k, len(guesses))], nil
}

// Vocabulary is the number of distinct tokens the corpus taught the model.
func (m *NGram) Vocabulary() int { return len(m.words) }
