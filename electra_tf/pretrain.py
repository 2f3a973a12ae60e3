"""`python -m electra_tf.pretrain`, the documented command line: it runs `electra_tf/cli/pretrain.py`,
which is also installed as the `electra-pretrain` command."""

import sys

from electra_tf.cli.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
