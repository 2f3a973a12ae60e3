"""Learns a BERT-style WordPiece vocabulary from a directory of text (tensorflow-text's learner).

python data_prep/learn_vocab.py --corpus-dir corpus/ --vocab-file vocab.txt --vocab-size 30522
"""

# A thin wrapper, so that the original's command line keeps working: the command is
# electra_tf/cli/learn_vocab.py (installed as `electra-learn-vocab`).
import sys

from electra_tf.cli.learn_vocab import main

if __name__ == "__main__":
    sys.exit(main())
