package main

import (
	"strings"
	"testing"
)

func trainBuiltin(t *testing.T, order int) *NGram {
	t.Helper()
	lm, err := Train(strings.NewReader(builtinCorpus), order)
	if err != nil {
		t.Fatal(err)
	}
	return lm
}

func TestFill(t *testing.T) {
	tests := []struct {
		sentence string
		want     string
		minOrder int // the shortest n-grams that see far enough
	}{
		{"Happy birthday to [MASK].", "you", 2},
		{"I would like a cup of [MASK], please.", "tea", 3},
		{"Once upon a [MASK] there was a king.", "time", 3},
		// The left context ("the") fits many words; the right one decides.
		{"The [MASK] barked at the postman.", "dog", 3},
		{"[MASK] morning, said the teacher.", "good", 3},
		// "in the" is followed by "morning" most often: only four-grams
		// see "rises" or "sets" before it.
		{"The sun rises in the [MASK].", "east", 4},
		{"The sun sets in the [MASK].", "west", 4},
	}
	for _, order := range []int{2, 3, 4} {
		lm := trainBuiltin(t, order)
		for _, tt := range tests {
			if order < tt.minOrder {
				continue
			}
			got, err := lm.Fill(tt.sentence, 3)
			if err != nil {
				t.Fatalf("Fill(%q): %v", tt.sentence, err)
			}
			if got[0].Word != tt.want {
				t.Errorf("order %d: Fill(%q) = %v, want %q first", order, tt.sentence, got, tt.want)
			}
		}
	}
}

// TestFillFollowsTheCorpus trains on another text: the answer changes with
// it, because it is computed from the counts, not looked up.
func TestFillFollowsTheCorpus(t *testing.T) {
	corpus := strings.Repeat("We sang happy birthday to grandma. Grandma smiled. ", 3) +
		"The cat sat on the sofa. Happy birthday to you."
	lm, err := Train(strings.NewReader(corpus), 3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := lm.Fill("Happy birthday to [MASK].", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Word != "grandma" || got[1].Word != "you" {
		t.Errorf("Fill = %v, want grandma (seen 3 times) before you (once)", got)
	}
	if !(got[0].LogProb > got[1].LogProb) {
		t.Errorf("guesses not ordered by probability: %v", got)
	}
}

func TestFillErrors(t *testing.T) {
	lm := trainBuiltin(t, 3)
	for sentence, want := range map[string]string{
		"Happy birthday to you.":       "no [MASK]",
		"[MASK] birthday to [MASK].":   "more than one [MASK]",
		"":                             "no [MASK]",
		"Zorglub wibble [mask] frobz!": "",
	} {
		_, err := lm.Fill(sentence, 1)
		if want == "" {
			if err != nil {
				t.Errorf("Fill(%q) with unknown words: %v", sentence, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Fill(%q) error = %v, want %q", sentence, err, want)
		}
	}
}

func TestTrainErrors(t *testing.T) {
	if _, err := Train(strings.NewReader("# only a comment\n"), 3); err == nil {
		t.Error("Train on an empty corpus succeeded")
	}
	if _, err := Train(strings.NewReader("A sentence."), 7); err == nil {
		t.Error("Train of order 7 succeeded")
	}
}

func TestTokenize(t *testing.T) {
	got := strings.Join(tokenize(`"Don't," said Anna: Happy birthday to [MASK]!`), " ")
	if want := "don't , said anna : happy birthday to [mask] !"; got != want {
		t.Errorf("tokenize = %q, want %q", got, want)
	}
}

// TestProbabilitiesSumToOne checks the model is a distribution: over the
// whole vocabulary, the probabilities after any context add up to one.
func TestProbabilitiesSumToOne(t *testing.T) {
	lm := trainBuiltin(t, 3)
	contexts := [][]string{{"birthday", "to"}, {"<s>", "<s>"}, {"zzz", "the"}, {"the", "sun"}}
	for _, words := range contexts {
		ctx := make([]int32, len(words))
		for i, w := range words {
			id, ok := lm.ids[w]
			if !ok {
				id = lm.ids[unknownWord]
			}
			ctx[i] = id
		}
		var sum float64
		for id := range lm.words {
			sum += lm.prob(ctx, int32(id))
		}
		if sum < 0.999 || sum > 1.001 {
			t.Errorf("P(· | %v) sums to %f", words, sum)
		}
	}
}

// FuzzFill checks that any text gets an answer or an error, never a panic,
// and that a text with one mask gets a word of the vocabulary.
func FuzzFill(f *testing.F) {
	lm, err := Train(strings.NewReader(builtinCorpus), 4)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"Happy birthday to [MASK].", "[MASK]", "[mask] [MASK]", "", "’ [MASK] 日本語 ,,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		guesses, err := lm.Fill(text, 2)
		masks := strings.Count(strings.Join(tokenize(text), " "), maskToken)
		switch {
		case masks == 1 && err != nil:
			t.Fatalf("Fill(%q) with one mask: %v", text, err)
		case masks != 1 && err == nil:
			t.Fatalf("Fill(%q) with %d masks succeeded", text, masks)
		case err == nil && (len(guesses) == 0 || !isWord(guesses[0].Word)):
			t.Fatalf("Fill(%q) = %v, want a word", text, guesses)
		}
	})
}
