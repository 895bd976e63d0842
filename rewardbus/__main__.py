import sys

from rewardbus.cli import main

sys.exit(main())
