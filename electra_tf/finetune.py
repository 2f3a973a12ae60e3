"""`python -m electra_tf.finetune`, the documented command line: it runs `electra_tf/cli/finetune.py`,
which is also installed as the `electra-finetune` command."""

import sys

from electra_tf.cli.finetune import main

if __name__ == "__main__":
    sys.exit(main())
