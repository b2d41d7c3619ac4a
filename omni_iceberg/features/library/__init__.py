"""The built-in features; importing this package registers all of them.

==================  ==============================================  =======================================  ======
feature             inputs                                          outputs                                  engine
==================  ==============================================  =======================================  ======
html_parser         RawData.raw_data, RawData.content_type          ProcessedData.parsed_text (string)       cpu
                    (HTML parsed, other content unchanged)
text_length         ProcessedData.parsed_text                       text_length (long)                       cpu
detected_lang       ProcessedData.parsed_text                       detected_lang (string),                  cpu
                                                                    lang_confidence (double)
token_count         ProcessedData.parsed_text                       token_count (long)                       cpu
punctuation_ratio   ProcessedData.parsed_text                       punctuation_ratio (double)               cpu
digit_ratio         ProcessedData.parsed_text                       digit_ratio (double)                     cpu
uppercase_ratio     ProcessedData.parsed_text                       uppercase_ratio (double)                 cpu
avg_word_length     ProcessedData.parsed_text                       avg_word_length (double)                 cpu
code_ratio          ProcessedData.parsed_text                       code_ratio (double)                      cpu
repetition_ratio    ProcessedData.parsed_text                       repetition_ratio (double)                cpu
stopword_ratio      ProcessedData.parsed_text                       stopword_ratio (double)                  cpu
safety_keyword_hits ProcessedData.parsed_text                       safety_keyword_hits (long)               cpu
domain_tag          ProcessedData.parsed_text                       domain_tag (string)                      cpu
math_recall         ProcessedData.parsed_text, detected_lang        math_recall (double)                     cpu
quality_score       ProcessedData.parsed_text                       quality_score (double)                   auto
perplexity          ProcessedData.parsed_text                       perplexity (double)                      gpu
==================  ==============================================  =======================================  ======

Models are loaded in ``setup()`` through :mod:`.models`, never at import, so importing
the library needs neither torch nor transformers nor fastText.
"""

from omni_iceberg.features.library import language, perplexity, quality, text, tokens
from omni_iceberg.features.library.language import DetectedLang, domain_tag, math_recall, stopword_ratio
from omni_iceberg.features.library.perplexity import Perplexity
from omni_iceberg.features.library.quality import QualityScore, repetition_ratio, safety_keyword_hits
from omni_iceberg.features.library.text import (
    avg_word_length,
    code_ratio,
    digit_ratio,
    html_parser,
    punctuation_ratio,
    text_length,
    uppercase_ratio,
)
from omni_iceberg.features.library.tokens import TokenCount

#: Every built-in, in the order of the table above.
BUILTINS = (
    html_parser, text_length, DetectedLang, TokenCount, punctuation_ratio, digit_ratio, uppercase_ratio,
    avg_word_length, code_ratio, repetition_ratio, stopword_ratio, safety_keyword_hits, domain_tag,
    math_recall, QualityScore, Perplexity,
)

__all__ = [
    "BUILTINS", "DetectedLang", "Perplexity", "QualityScore", "TokenCount", "avg_word_length", "code_ratio",
    "digit_ratio", "domain_tag", "html_parser", "language", "math_recall", "perplexity", "punctuation_ratio",
    "quality", "repetition_ratio", "safety_keyword_hits", "stopword_ratio", "text", "text_length", "tokens",
    "uppercase_ratio",
]
