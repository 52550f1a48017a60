"""SentencePiece-style kernels: the normalizer, the Unigram (Viterbi over a double-array trie) and
byte-fallback BPE models, the streamed BPE word, and the encoder loop over them."""
