import numpy as np
from sklearn.ensemble import IsolationForest

from sentinel_models.isolation_paths import IsolationPaths


def test_isolation_paths_score_like_scikit_learn_with_and_without_feature_subsampling() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2000, 12))
    probe = np.vstack([rng.normal(size=(40, 12)) * 3, x[:5]])
    for max_features in (1.0, 0.5):
        forest = IsolationForest(n_estimators=50, max_features=max_features, random_state=1).fit(x)
        np.testing.assert_allclose(IsolationPaths(forest).score(probe), -forest.score_samples(probe), rtol=1e-12)
