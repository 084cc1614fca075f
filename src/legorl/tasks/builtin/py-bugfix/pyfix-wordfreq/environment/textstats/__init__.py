from textstats.core import top_words, word_counts, words
