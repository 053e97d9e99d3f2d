// Fold the in-page contents (the right column) while they would cover a wide code cell
// (wide_code.css): sphinx-book-theme's `hide` class shows only their "Contents" title, and
// unfolds them on hover. From 1200 px up only; below that the contents are a drawer.
(() => {
  const wide = window.matchMedia("(min-width: 1200px)");
  let cells = [], toc = null, queued = false;

  const update = () => {
    queued = false;
    if (!toc) return;
    let covered = false;
    if (wide.matches) {
      const top = toc.getBoundingClientRect().top;
      // unfolded, the contents reach down by their full height (scrollHeight, also while
      // folded), at most to the window's bottom (past that they scroll within themselves)
      const bottom = Math.min(top + toc.scrollHeight, window.innerHeight);
      covered = cells.some((cell) => {
        const box = cell.getBoundingClientRect();
        return box.top < bottom && box.bottom > top;
      });
    }
    toc.classList.toggle("hide", covered);
  };
  const schedule = () => {
    if (!queued) {
      queued = true;
      window.requestAnimationFrame(update);
    }
  };

  const start = () => {
    toc = document.querySelector("div.bd-sidebar-secondary");
    cells = Array.from(document.querySelectorAll("div.cell.wide-code"));
    if (!toc || cells.length === 0) return;
    window.addEventListener("scroll", schedule, { passive: true });
    window.addEventListener("resize", schedule);
    update();
  };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
