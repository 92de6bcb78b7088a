"""Unit tests of framework/: the cycle, the score index, plugins, spreading and affinity."""
