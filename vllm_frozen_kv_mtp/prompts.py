"""Python-source prompts (the trained pair's domain), shared by the demo and benchmarks."""

CODE_PROMPTS: list[str] = [
    "def forward(self, hidden_states):\n",
    "class Attention(nn.Module):\n    def __init__(self, config):\n",
    "import os\nimport sys\n\n\ndef main():\n",
    "    for i in range(len(items)):\n",
    "        if self.training:\n",
    "    @property\n    def name(self):\n",
    "with open(path) as f:\n    ",
    'if __name__ == "__main__":\n',
    "def __repr__(self):\n        return ",
    "        raise ValueError(",
    "    def __init__(self, *args, **kwargs):\n        super().__init__(",
    "    return self._cache[key]\n\n\ndef ",
    "try:\n    import numpy as np\nexcept ImportError:\n",
    "        self.assertEqual(",
    "    def test_",
    "        result = []\n        for ",
]
