"""The learned value model's estimator: LightGBM behind a scikit-learn-style interface.

Its own module because it subclasses scikit-learn's ``BaseEstimator``, whose import costs
seconds: training (``memlens.learn.train``) and online retraining need it, replaying a saved
model does not (``memlens.scorer.model`` re-exports it lazily).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from memlens.scorer.decision_features import FEATURE_NAMES


class ValueScorer(ClassifierMixin, BaseEstimator):
    """P(worth keeping | decision features): LightGBM's binary objective, deterministic."""

    def __init__(self, n_estimators: int = 100, num_leaves: int = 31, learning_rate: float = 0.1,
                 min_child_samples: int = 20, subsample: float = 1.0,
                 colsample_bytree: float = 1.0, reg_lambda: float = 0.0, random_state: int = 0,
                 n_jobs: int = 1, sampling: str = "bagging") -> None:  # fmt: skip
        self.n_estimators = n_estimators
        self.num_leaves = num_leaves
        self.learning_rate = learning_rate
        self.min_child_samples = min_child_samples
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.sampling = sampling  # "bagging" (all rows, or subsample) or "goss" (faster)

    def lgb_params(self) -> dict:
        """The LightGBM parameters this estimator trains with."""
        return {
            "objective": "binary",
            "num_leaves": int(self.num_leaves),
            "learning_rate": float(self.learning_rate),
            "min_data_in_leaf": int(self.min_child_samples),
            "bagging_fraction": float(self.subsample),
            "bagging_freq": 1 if self.subsample < 1.0 else 0,
            "feature_fraction": float(self.colsample_bytree),
            "lambda_l2": float(self.reg_lambda),
            "seed": int(self.random_state),
            "deterministic": True,
            "force_row_wise": True,
            "num_threads": int(self.n_jobs),
            "data_sample_strategy": str(self.sampling),
            "verbose": -1,
        }

    def fit(self, X, y, eval_set: tuple | None = None, feature_names=None) -> ValueScorer:
        """Train on ``X`` (n, F) and 0/1 labels ``y``; ``eval_set=(X_val, y_val)`` records
        AUC and log loss per round in ``evals_result_``."""
        import lightgbm as lgb

        X = np.asarray(X, np.float64)
        y = np.asarray(y, np.float64)
        if X.ndim != 2 or len(X) != len(y):
            raise ValueError(f"X must be (n, F) with n = len(y); got {X.shape} and {y.shape}")
        if len(y) == 0:
            raise ValueError("cannot fit on zero rows")
        if not np.isin(y, (0.0, 1.0)).all():
            raise ValueError("labels must be 0 or 1")
        names = list(feature_names) if feature_names is not None else list(FEATURE_NAMES)
        if len(names) != X.shape[1]:
            raise ValueError(f"{len(names)} feature names for {X.shape[1]} columns")
        params = {**self.lgb_params(), "metric": ["auc", "binary_logloss"]}
        train = lgb.Dataset(X, y, feature_name=names, free_raw_data=True,
                            params={"verbose": -1})  # fmt: skip
        valid, self.evals_result_ = [], {}
        callbacks = []
        if eval_set is not None:
            Xv, yv = (np.asarray(a, np.float64) for a in eval_set)
            valid = [lgb.Dataset(Xv, yv, reference=train, params={"verbose": -1})]
            callbacks = [lgb.record_evaluation(self.evals_result_)]
        self.booster_ = lgb.train(params, train, num_boost_round=int(self.n_estimators),
                                  valid_sets=valid, valid_names=["validation"][: len(valid)],
                                  callbacks=callbacks)  # fmt: skip
        self.feature_names_in_ = np.asarray(names, dtype=object)
        self.n_features_in_ = X.shape[1]
        self.classes_ = np.asarray([0, 1])
        return self

    def decision_function(self, X) -> np.ndarray:
        """Raw scores (log-odds), LightGBM's own evaluation with one thread."""
        return self.booster_.predict(np.asarray(X, np.float64), raw_score=True, num_threads=1)

    def predict_proba(self, X) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-self.decision_function(X)))
        return np.column_stack([1.0 - p, p])

    def predict(self, X) -> np.ndarray:
        return (self.decision_function(X) > 0).astype(np.int64)

    @property
    def feature_importances_(self) -> np.ndarray:
        """Total gain of the splits on each feature."""
        return self.booster_.feature_importance(importance_type="gain")
